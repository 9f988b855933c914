"""Corpus replay: every file in the corpus directory is one test, run at its case's own world size
(``--world-sizes`` restricts what the strategies draw, not what is replayed; under ``--fuzz-attach`` a file of
another world size than the torchrun job's is skipped, saying so).

``expect: pass`` must match its reference.  ``expect: fail`` (a known open bug) is
an xfail only while it fails *as recorded*: with the recorded verdict's signature,
or another one a known-bug record listing the file explains (``corpus/known_bugs.toml``: a
bug that shows as a hang or a mismatch).  Failing otherwise is a failure (a new bug, or a harness
regression, must not hide behind an old one), and so is passing: the day the bug
is fixed the run says so and the file's expectation should be flipped.
"""

import pytest

from parityfuzz.frontends.show import describe_case
from parityfuzz.judge.verify import verify_case
from parityfuzz.triage import corpus
from parityfuzz.triage import KNOWN_BUG, explain
from parityfuzz.triage.known import shipped


def pytest_generate_tests(metafunc):
    if "corpus_file" in metafunc.fixturenames:
        from parityfuzz.frontends.plugin import options_from_config

        root = options_from_config(metafunc.config).corpus_dir
        files = corpus.discover(root)
        metafunc.parametrize("corpus_file", files, ids=[str(p.relative_to(root)) for p in files])


#: A known hang is replayed with this timeout (unless --case-timeout says otherwise): a corpus case trains in a
#: second or two, and waiting out the default timeout (scaled for fuzzed cases) proves nothing more.
HANG_REPLAY_TIMEOUT_S = 10.0


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
    timeout = fuzz_session.options.case_timeout_s
    if timeout is None and entry.expect == "fail" and entry.verdict is not None and entry.verdict.kind == "hang":
        timeout = HANG_REPLAY_TIMEOUT_S
    verdict = verify_case(case, fuzz_session.executor, timeout)
    if entry.expect == "pass":
        if not verdict.ok:
            pytest.fail(f"{corpus_file}: {verdict.describe()}\n\n{describe_case(case)}", pytrace=False)
        return
    if verdict.ok:
        pytest.fail(f"{corpus_file}: expected to fail ({entry.known_issue or entry.note or 'known failure'}) but "
                    "passes: if torch fixed it, flip the file to expect: pass", pytrace=False)
    if fails_as_recorded(entry, verdict):
        pytest.xfail(entry.known_issue or entry.note or "known failure")
    recorded = f"{entry.known_issue!r}" if entry.known_issue else f"signature {entry.verdict.bug_signature()}"
    pytest.fail(f"{corpus_file}: fails, but not as recorded ({recorded}): {verdict.bug_signature()}: "
                f"{verdict.describe()}\n\n{describe_case(case)}", pytrace=False)


def fails_as_recorded(entry: corpus.Entry, verdict) -> bool:
    """Whether a known failure's replay is the failure the file records."""
    if entry.verdict is not None and verdict.bug_signature() == entry.verdict.bug_signature():
        return True
    listing = tuple(b for b in shipped() if b.lists(entry.path))
    return not verdict.ok and explain(entry.case, verdict, bugs=listing).kind == KNOWN_BUG
