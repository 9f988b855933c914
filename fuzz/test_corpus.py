"""Corpus replay: every file in the corpus directory is one test, run at its case's own world size
(``--world-sizes`` restricts what the strategies draw, not what is replayed; under ``--fuzz-attach`` a file of
another world size than the torchrun job's is skipped, saying so).

``expect: pass`` must match its reference.  ``expect: fail`` (a known open bug) is
an xfail only while it fails *as recorded* (:mod:`parityfuzz.triage.replay`).  Failing otherwise is a failure (a new
bug, or a harness regression, must not hide behind an old one), and so is passing: the day the bug
is fixed the run says so and the file's expectation should be flipped.
"""

import pytest

from parityfuzz.frontends.show import describe_case
from parityfuzz.judge.verify import verify_case
from parityfuzz.triage import corpus, replay


def pytest_generate_tests(metafunc):
    if "corpus_file" in metafunc.fixturenames:
        from parityfuzz.frontends.plugin import options_from_config

        root = options_from_config(metafunc.config).corpus_dir
        files = corpus.discover(root)
        metafunc.parametrize("corpus_file", files, ids=[str(p.relative_to(root)) for p in files])


def test_corpus_case(corpus_file, fuzz_session, request):
    try:
        entry = corpus.load(corpus_file)
    except corpus.CorpusError as e:
        pytest.fail(str(e), pytrace=False)
    case = entry.case
    attached = fuzz_session.config.getoption("fuzz_attach")
    if attached and case.world_size not in fuzz_session.options.world_sizes:
        pytest.skip(f"case needs world size {case.world_size}; the torchrun job at {attached} has "
                    f"{fuzz_session.options.world_sizes[0]} ranks")
    verdict = verify_case(case, fuzz_session.executor, replay.timeout_for(entry, fuzz_session.options.case_timeout_s))
    result = replay.outcome(entry, verdict)
    if result == replay.REGRESSION:
        fixed = "" if entry.expect == "pass" else " (its known bug is fixed in this torch: it must pass)"
        pytest.fail(f"{corpus_file}{fixed}: {verdict.describe()}\n\n{describe_case(case)}", pytrace=False)
    if result == replay.PASSES and replay.expected(entry) == "fail":
        pytest.fail(f"{corpus_file}: expected to fail ({entry.known_issue or entry.note or 'known failure'}) but "
                    "passes: if torch fixed it, flip the file to expect: pass", pytrace=False)
    if result == replay.FAILS_AS_RECORDED:
        pytest.xfail(entry.known_issue or entry.note or "known failure")
    if result == replay.FAILS_OTHERWISE:
        recorded = f"{entry.known_issue!r}" if entry.known_issue else f"signature {entry.verdict.bug_signature()}"
        pytest.fail(f"{corpus_file}: fails, but not as recorded ({recorded}): {verdict.bug_signature()}: "
                    f"{verdict.describe()}\n\n{describe_case(case)}", pytrace=False)
