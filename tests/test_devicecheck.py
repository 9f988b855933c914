"""The device check (``python -m parityfuzz.frontends.devicecheck``): on a machine without a GPU it says so and runs
nothing; ``--cpu`` runs the very check on CPU ranks, which is how it is tested here (CI has no GPU)."""

import json
import shutil
from collections import Counter

import pytest
import torch

from parityfuzz.frontends import devicecheck
from parityfuzz.triage import corpus
from parityfuzz.triage.known import DEFAULT_PATH

SHIPPED = DEFAULT_PATH.parent
PASSING, KNOWN = "fsdp2/289b46c12db58149.json", "fsdp2/6f89a6ac47c9319c.json"  # world sizes 1 and 2


def copied(tmp_path, *names):
    for name in names:
        (tmp_path / "corpus" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SHIPPED / name, tmp_path / "corpus" / name)
    return tmp_path / "corpus"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine with a GPU runs the check itself")
def test_without_a_gpu_it_says_so_and_runs_nothing(capsys, tmp_path):
    assert devicecheck.main(["--findings", str(tmp_path / "f")]) == 2
    assert "no CUDA device" in capsys.readouterr().out and not (tmp_path / "f").exists()


def test_the_sample_holds_files_of_each_family_the_world_sizes_allow(tmp_path):
    files = corpus.discover(SHIPPED)
    one = devicecheck.sample(files, 2, (1,))
    assert one and all(corpus.load(p).case.world_size == 1 for p in one)
    assert max(Counter(p.parent.name for p in one).values()) <= 2
    assert devicecheck.sample(files, 2, (1,)) == one  # the same files every time
    assert devicecheck.world_sizes(1, cpu=False) == (1,) and devicecheck.world_sizes(8, cpu=False) == (1, 2, 4, 8)


def test_the_check_replays_fuzzes_and_prints_one_table(tmp_path, capsys):
    """A passing file and a known bug's file replay as recorded, a target fuzzes: exit 0.  The known bug's file
    marked ``expect: pass`` is a regression to look at: exit 1, the table names it."""
    corpus_dir = copied(tmp_path, PASSING, KNOWN)
    report = tmp_path / "check.json"
    code = devicecheck.main(["--cpu", "--sample", "2", "--budget", "8", "--targets", "fsdp1", "--corpus-dir",
                             str(corpus_dir), "--findings", str(tmp_path / "found"), "--report", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "fsdp2" in out and "nothing to look at" in out
    done = json.loads(report.read_text())
    assert sorted(r["outcome"] for r in done["replayed"]) == ["fails as recorded", "passes"]
    assert done["fuzzed"]["targets"]["fsdp1"]["cases"] >= 1
    doc = json.loads((corpus_dir / KNOWN).read_text())
    (corpus_dir / KNOWN).write_text(json.dumps({**doc, "expect": "pass", "known_issue": ""}))
    assert devicecheck.main(["--cpu", "--sample", "2", "--budget", "0", "--corpus-dir", str(corpus_dir)]) == 1
    out = capsys.readouterr().out
    assert "to look at:" in out and f"{KNOWN}: regression" in out
