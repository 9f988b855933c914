"""Corpus replay: every file in the corpus directory is one test.

``expect: pass`` must match its reference; ``expect: fail`` (a known open bug)
is a strict xfail, so the day it starts passing the run fails loudly as
XPASS(strict) and the file's expectation should be flipped.
"""

import pytest

from fuzz import corpus
from fuzz.show import describe_case
from fuzz.verify import check


def pytest_generate_tests(metafunc):
    if "corpus_file" in metafunc.fixturenames:
        from fuzz.plugin import options_from_config

        root = options_from_config(metafunc.config).corpus_dir
        files = corpus.discover(root)
        metafunc.parametrize("corpus_file", files, ids=[str(p.relative_to(root)) for p in files])


def test_corpus_case(corpus_file, fuzz_session, request):
    try:
        entry = corpus.load(corpus_file)
    except corpus.CorpusError as e:
        pytest.fail(str(e), pytrace=False)
    case = entry.case
    if case.world_size not in fuzz_session.options.world_sizes:
        pytest.fail(f"{corpus_file}: case needs world size {case.world_size}, outside --world-sizes "
                    f"{','.join(map(str, fuzz_session.options.world_sizes))}", pytrace=False)
    if entry.expect == "fail":
        reason = entry.known_issue or entry.note or "known failure"
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    verdict = check(case, fuzz_session.executor, fuzz_session.options.case_timeout_s)
    if not verdict.ok:
        pytest.fail(f"{corpus_file}: {verdict.describe()}\n\n{describe_case(case)}", pytrace=False)
