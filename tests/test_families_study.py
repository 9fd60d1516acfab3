"""scripts/families_study.sh: one episode per family and agent, the uplift table, an honest exit status.

The episodes are a stand-in ``metatrain`` (``MT``) that writes a finished run folder, so this checks
the script's plumbing in seconds; the real episodes are what docs/families.md records.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAKE_MT = """\
import os
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from run_dirs import write_run_dir

args = dict(zip(sys.argv[2::2], sys.argv[3::2]))
assert sys.argv[1] == "episode", sys.argv
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(args["--family"] + " " + args["--agent"] + "\\n")
if args["--family"] in os.environ.get("FAKE_FAIL", "").split():  # the job failed: a run folder, no post
    runs, agent, family = Path(args["--runs"]), args["--agent"], args["--family"]
    write_run_dir(runs, post=None, status="failed", error="boom", name="run", agent=agent, family=family)
    raise SystemExit(1)
if "fail" in args["--agent"]:  # the episode died before writing anything
    print("boom: the job failed", file=sys.stderr)
    raise SystemExit(3)
write_run_dir(Path(args["--runs"]), name="run", agent=args["--agent"], family=args["--family"])
Path(args["--json"]).write_text("{{}}")
"""


def run_study(tmp_path: Path, agents: str, **extra: str) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "mt"
    fake.write_text(f"#!{sys.executable}\n" + FAKE_MT.format(tests=str(ROOT / "tests")))
    fake.chmod(0o755)
    env = {
        **os.environ,
        "MT": str(fake),
        "PYTHON": sys.executable,
        "SEED": "0",
        "PARALLEL": "2",
        "FAMILIES": "calc_chain multi_hop",
        "AGENTS": agents,
        "RUNS": str(tmp_path / "runs"),
        "FAKE_CALLS": str(tmp_path / "calls.txt"),
        **extra,
    }
    return subprocess.run(
        ["bash", "scripts/families_study.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_one_row_per_family_and_agent(tmp_path: Path) -> None:
    ablation = "reference:train.advantage_scale=batch,env_args.min_hops=2"
    done = run_study(tmp_path, f"reference {ablation}")
    assert done.returncode == 0, done.stderr
    table = (tmp_path / "runs" / "uplift.md").read_text()
    rows = [
        line
        for line in table.splitlines()
        if line.startswith("| calc_chain") or line.startswith("| multi_hop")
    ]
    assert len(rows) == 4
    for family in ("calc_chain", "multi_hop"):
        for k, agent in enumerate(("reference", ablation), start=1):
            assert any(r.startswith(f"| {family} ") and f"`{agent}`" in r for r in rows)
            assert f"{family} ({agent}): episode exit 0" in done.stdout
            assert (tmp_path / "runs" / f"{family}-a{k}" / "run" / "result.json").is_file()


@pytest.mark.parametrize("agents", ["reference reference:fail=1", "reference:fail=1"])
def test_a_failed_episode_fails_the_study_but_keeps_the_rest(tmp_path: Path, agents: str) -> None:
    done = run_study(tmp_path, agents)
    assert done.returncode == 1
    assert "calc_chain (reference:fail=1): episode exit 3 (log: " in done.stdout
    k = agents.split().index("reference:fail=1") + 1
    assert "boom: the job failed" in (tmp_path / "runs" / f"calc_chain-a{k}.log").read_text()
    rows = [line for line in done.stdout.splitlines() if line.startswith("| calc_chain")]
    assert len(rows) == len(agents.split()) - 1  # the finished ones still make the table


def test_resume_keeps_finished_runs_and_reruns_the_rest(tmp_path: Path) -> None:
    """A study cut short (here: multi_hop's episodes failed) re-runs only what did not finish."""
    agents = "reference reference:train.lr=1e-4"
    first = run_study(tmp_path, agents, FAKE_FAIL="multi_hop")
    assert first.returncode == 1
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    again = run_study(tmp_path, agents, RESUME="1")
    assert again.returncode == 0, again.stderr
    assert sorted(calls.read_text().splitlines()) == [
        "multi_hop reference",
        "multi_hop reference:train.lr=1e-4",
    ]
    assert "calc_chain (reference): already finished in " in again.stdout
    rows = [line for line in again.stdout.splitlines() if line.startswith(("| calc_chain", "| multi_hop"))]
    assert len(rows) == 4  # kept and re-run alike; the failed attempts' folders are set aside
    assert sorted(p.name[: len("multi_hop-a1")] for p in (tmp_path / "runs" / "unfinished").iterdir()) == [
        "multi_hop-a1",
        "multi_hop-a2",
    ]
    calls.write_text("")
    swapped = run_study(tmp_path, "reference:train.lr=1e-4 reference", RESUME="1")
    assert swapped.returncode == 0  # the agents changed places: a folder of another agent is not kept
    assert len(calls.read_text().splitlines()) == 4
