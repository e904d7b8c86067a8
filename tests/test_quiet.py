"""Quiet runs for cron: nothing printed when nothing needs a person, the audit findings a new upstream
commit brings printed (and exit status 3 when asked for), one summary line per publish, and the crontab of
docs/operating.md run as written against the local stand-in of GitHub."""

import json
import os
import re
import shlex
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from conftest import COMMITS, NEWEST, PROJECT, SEED_AS_OF, SEED_RETRIEVED, SNAPSHOTS, cli, snapshot_id
from github_server import FakeGitHub, ServedCommit

from pipeline.outcome import NEW_FINDINGS_STATUS

# The row the new commit makes implausible: its p99 inter-token latency 40 times its median, which the
# itl_tail_ratio rule (at most 20) reports.
TASK, ROW = "gpqa", 0




def commit_with_a_new_finding(base: ServedCommit, folder: Path) -> tuple[ServedCommit, str]:
    """A commit an hour after `base` whose one change is a configuration whose p99 inter-token latency is
    40 times its median; and that configuration's audit row key."""
    shutil.copytree(base.folder, folder)
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    task_file = folder / "tasks" / f"{TASK}.json"
    tasks = json.loads(task_file.read_text())
    row = tasks["configurations"][ROW]
    row["p99_itl_ms"] = row["median_itl_ms"] * 40
    task_file.write_text(json.dumps(tasks))
    moment = datetime.strptime(base.time, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc) + timedelta(hours=1)
    sha = "feedc0de" + base.sha[8:]
    facts = {**json.loads((base.folder / "snapshot.json").read_text()), "commit": sha,
             "commit_time": moment.isoformat(), "commit_subject": "Re-measure"}
    (folder / "snapshot.json").write_text(json.dumps(facts))
    slug = row["model_id"].split("/")[-1].lower()
    key = f"{TASK}:{slug}/{row['gpu_model']}/{row['num_gpus']}/{row['max_num_seqs']}#1"
    return ServedCommit(sha, moment.strftime("%Y-%m-%dT%H:%M:%SZ"), facts["commit_subject"], folder, True), key


# What the CLI prints, run in this process: a process of its own, what cron and make start, is the subject of
# the cron recipe's test and of make's; they also see anything a library writes past Python's stderr.
run = cli


def test_a_new_commit_with_a_new_finding_exits_3_and_names_it_and_a_quiet_rerun_prints_nothing(
    github: FakeGitHub, tmp_path: Path
) -> None:
    base = COMMITS["7885788"]
    github.commits = [base]
    out = tmp_path / "out"
    arguments = ["refresh", "--out", out, "--as-of", SEED_AS_OF, "--retrieved", SEED_RETRIEVED, "--quiet",
                 "--alert-new-findings"]
    first = run(*arguments)
    # The first build's findings are all new to a reader: printed once, with the status.
    assert first.returncode == NEW_FINDINGS_STATUS, first.stderr
    assert first.stdout == "" and "finding(s) in the first published build:" in first.stderr
    assert first.stderr.splitlines()[-1].startswith("refresh: published 2026-02-16-7885788 (commit 7885788): first build")

    again = run(*arguments)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")

    commit, key = commit_with_a_new_finding(base, tmp_path / "upstream")
    github.commits.append(commit)
    new = run(*arguments)
    assert new.returncode == NEW_FINDINGS_STATUS, new.stderr
    lines = new.stderr.splitlines()
    new_id = f"{commit.time[:10]}-{commit.sha[:7]}"
    assert lines[:3] == [f"audit: {new_id}: 1 finding(s) the previous published build did not have:",
                         "  info      1  itl_tail_ratio, expected at most 20", f"    {key} = 40"], lines
    # The one summary line: the commit and its subject; the p99 changes no index row (chosen by median ITL).
    assert lines[3:] == [f"refresh: published {new_id} (commit feedc0d \"Re-measure\"): "
                         f"0 index row(s) moved ({lines[3].rsplit('(', 1)[1]}"], lines

    # Without --alert-new-findings the same news prints and the status is 0; nothing new, nothing printed.
    assert (run(*arguments).stderr, run(*arguments[:-1]).stderr) == ("", "")


def test_a_publish_without_quiet_ends_with_one_summary_line_naming_the_largest_move(tmp_path: Path) -> None:
    out = tmp_path / "out"
    older, newer = (folder for folder in SNAPSHOTS if snapshot_id(folder) in ("2025-11-30-9fa07d1", "2025-11-30-2689bff"))
    assert run("refresh", "--source", older, "--out", out).returncode == 0
    published = run("refresh", "--source", newer, "--out", out)
    assert published.returncode == 0, published.stderr
    summary = published.stderr.splitlines()[-1]
    diff = json.loads(run("diff", "--out", out, "9fa07d1", "2689bff", "--format", "json").stdout)
    largest = max((row for row in diff["index_changes"] if row["relative_change"] is not None),
                  key=lambda row: abs(row["relative_change"]))
    # The commit's subject, "Update data", only where the line has room for it: not beside this model id.
    assert summary.startswith("refresh: published 2025-11-30-2689bff (commit 2689bff): "
                              f"{len(diff['index_changes'])} index row(s) moved, the largest {largest['task']} "
                              f"{largest['model_id']} on {largest['gpu']}: "), summary
    assert f"({largest['relative_change'] * 100:+.1f} %)" in summary
    # Nothing new: the one line that says so, and with --quiet nothing at all.
    assert "nothing to do" in run("refresh", "--source", newer, "--out", out).stderr
    assert run("refresh", "--source", newer, "--out", out, "-q").stderr == ""


def test_make_quiet_twice_prints_nothing_the_second_time(tmp_path: Path) -> None:
    def make() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["make", "-C", str(PROJECT), "--no-print-directory", f"OUT={tmp_path / 'out'}",
                               f"SOURCE={NEWEST}", "QUIET=1"], capture_output=True, text=True, timeout=400,
                              env={**os.environ, "MAKEFLAGS": ""})

    first = make()
    assert first.returncode == 0, first.stderr
    assert "refresh: published 2026-02-16-7885788" in first.stderr  # the first build's findings are news
    second = make()
    assert (second.returncode, second.stdout, second.stderr) == (0, "", "")
    # A failure still prints its one line.
    failed = subprocess.run(["make", "-C", str(PROJECT), "--no-print-directory", f"OUT={tmp_path / 'out'}",
                             f"SOURCE={tmp_path / 'missing'}", "QUIET=1"], capture_output=True, text=True,
                            timeout=400, env={**os.environ, "MAKEFLAGS": ""})
    assert failed.returncode == 2 and "energy-index: error:" in failed.stderr


@pytest.mark.make
def test_make_alert_fails_on_new_findings_with_the_clis_status_in_makes_last_line(tmp_path: Path) -> None:
    def make(*variables: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["make", "-C", str(PROJECT), "--no-print-directory", *variables],
                              capture_output=True, text=True, timeout=400,
                              env={name: value for name, value in os.environ.items()
                                   if name not in ("MAKEFLAGS", "MAKELEVEL")})

    arguments = (f"OUT={tmp_path / 'out'}", f"SOURCE={NEWEST}", "QUIET=1", "ALERT=1")
    first = make(*arguments)
    # The first build's findings are all new: the CLI's status 3, which GNU make (0, 1 or 2 only) reports as
    # its own 2 with the 3 in its last line, unlike a failure's "Error 1".
    assert first.returncode == 2 and first.stdout == "", first.stderr
    lines = first.stderr.splitlines()
    assert "finding(s) in the first published build:" in lines[0]
    assert lines[-2].startswith("refresh: published 2026-02-16-7885788")
    assert re.fullmatch(rf"make: \*\*\* \[Makefile:\d+: refresh\] Error {NEW_FINDINGS_STATUS}", lines[-1]), lines[-1]
    again = make(*arguments)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    assert re.search(r"^  ALERT +1$", make("help", "ALERT=1").stdout, re.M)


def crontab() -> tuple[dict[str, str], dict[str, str]]:
    """docs/operating.md's crontab: its variables and the command of each job, by the subcommand it runs."""
    text = (PROJECT / "docs" / "operating.md").read_text(encoding="utf-8")
    block = re.search(r"```crontab\n(.*?)```", text, re.S).group(1)
    variables = dict(line.split("=", 1) for line in block.splitlines() if re.match(r"^[A-Z_]+=", line))
    commands = [line.split(None, 5)[5] for line in block.splitlines() if re.match(r"^[\d*]", line)]
    return variables, {re.search(r"energy-index (\S+)", command).group(1): command for command in commands}


@pytest.mark.make
def test_the_cron_recipe_as_written_mails_only_on_trouble(github: FakeGitHub, tmp_path: Path) -> None:
    variables, jobs = crontab()
    assert jobs.keys() == {"refresh", "verify"}
    command = jobs["refresh"]
    assert "MAILTO" in variables and "--quiet" in command and "--quiet" in jobs["verify"]
    # Cron runs the job with sh and the crontab's variables; here the checkout and OUT are this one's.
    environment = {**os.environ, **variables, "ENERGY_INDEX_HOME": str(PROJECT),
                   "ENERGY_INDEX_OUT": str(tmp_path / "out"), "SHELL": "/bin/sh"}

    def cron(job: str = "refresh") -> subprocess.CompletedProcess[str]:
        return subprocess.run(["/bin/sh", "-c", jobs[job]], capture_output=True, text=True, timeout=400,
                              env=environment, cwd=tmp_path)

    github.commits = [COMMITS["0578467"]]
    first = cron()
    assert first.returncode == NEW_FINDINGS_STATUS and first.stderr and first.stdout == ""
    quiet = cron()
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")  # no mail
    assert (weekly := cron("verify")).returncode == 0 and (weekly.stdout, weekly.stderr) == ("", "")
    github.commits.append(COMMITS["7885788"])
    published = cron()
    # 7885788 brings no finding 0578467 did not have: published, and nothing to mail.
    assert (published.returncode, published.stderr) == (0, ""), published.stderr
    assert json.loads((tmp_path / "out" / "current" / "refresh.json").read_text())["snapshots"].keys() == {
        "2026-02-14-0578467", "2026-02-16-7885788"}
    github.rate_limit_reset = int(datetime.now(timezone.utc).timestamp()) + 3600
    failed = cron()
    assert failed.returncode == 1 and failed.stderr.startswith("energy-index: error:"), failed.stderr
    assert len(failed.stderr.splitlines()) == 1
    assert shlex.split(command)[0] == "cd"
    archived = tmp_path / "out" / "raw" / "2026-02-16-7885788" / "tasks" / "gpqa.json"
    archived.write_bytes(archived.read_bytes().replace(b"0.", b"1.", 1))  # a digit changed: the same size
    damaged = cron("verify")
    assert damaged.returncode == 1 and damaged.stderr.startswith("energy-index: error:"), damaged.stderr


def test_each_step_that_writes_is_silent_with_quiet_and_still_says_a_failure(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for step in (["fetch", "--source", NEWEST], ["ingest"], ["build"], ["export"], ["release"]):
        done = run(*step, "--out", out, "--quiet")
        assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), (step, done.stderr)
        assert run(*step, "--out", out).stderr, step  # without --quiet each says what it did
    failed = run("ingest", "--out", out, "--snapshot", "no-such-snapshot", "--quiet")
    assert failed.returncode == 1 and failed.stderr.startswith("energy-index: error: ")
    assert len(failed.stderr.splitlines()) == 1
