"""energy-index verify, as `git fsck` or `restic check` are: every published file against the size and sha256
recorded when it was published (published-files.json, pipeline/published.py), every snapshot in the raw archive
against its manifest (pipeline/archive.py), and every published snapshot's archived copy there, which a full
rebuild needs. Every byte is read: a refresh with nothing to do reads the published files but checks the
archive by stat only, so a changed digit there waits for the next full rebuild; this finds it on the day it
runs (weekly from cron, docs/operating.md). It writes nothing; each damaged file is named with the command
that repairs it, in the order to run them: the archive is fetched again before a refresh ingests from it."""

import shlex
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from pipeline import settings
from pipeline.archive import archive_problems, commit_moment, fetch_again, read_manifest
from pipeline.errors import NEXT_STEP, PipelineError, command_name, out_option
from pipeline.fingerprint import file_sha256
from pipeline.paths import Paths
from pipeline.publish import REFRESH_RECORD
from pipeline.published import FILE_RECORD, damaged_files, recorded_files


@dataclass(frozen=True)
class Damage:
    path: Path  # the damaged file, or the archived snapshot's folder its sentence names a file of
    problem: str
    repair: str  # the command that repairs it, as it can be typed here


@dataclass(frozen=True)
class Verified:
    published_files: int  # the files published-files.json records (0: nothing published)
    snapshots: int  # the snapshots in OUT/raw
    archived_files: int  # their files, as their manifests list them
    damage: list[Damage]

    def summary(self) -> str:
        """What was found intact, for the line an intact run ends with."""
        published = (f"{self.published_files:,} published files as published" if self.published_files else
                     "nothing published yet")
        return f"{published} and {self.snapshots} archived snapshot(s), {self.archived_files:,} files, as fetched"

    def message(self, out: Path) -> str:
        """The failure's lines: a count, then each damaged file with its repair."""
        return str(PipelineError(
            f"{out}: {len(self.damage)} damaged file(s) or missing copies; repair them in the order listed",
            [f"{d.path}: {d.problem}; repair: {d.repair}" for d in self.damage]))


def verify(paths: Paths) -> Verified:
    """Check the archive, then the published files, reading every byte; what is damaged, with its repair."""
    snapshot_ids = sorted(p.name for p in paths.raw_dir.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if paths.raw_dir.is_dir() else []
    if not snapshot_ids and not paths.current.is_dir():
        raise PipelineError(f"{paths.out}: nothing has been fetched or published there to verify; {NEXT_STEP}")
    damage, archived_files = [], 0
    for snapshot_id in snapshot_ids:
        with suppress(PipelineError):  # a manifest that cannot be read is among the problems below
            archived_files += len(read_manifest(paths.raw_snapshot(snapshot_id))["files"])
        damage += [Damage(paths.raw_snapshot(snapshot_id), problem, _published_fetch(paths, snapshot_id))
                   for problem in _problems(paths, snapshot_id)]
    published = set(paths.parquet_files("snapshots")) if paths.current.is_dir() else set()
    for snapshot_id in sorted(published - set(snapshot_ids)):
        damage.append(Damage(paths.raw_snapshot(snapshot_id), "missing: the fetched copy of a published snapshot, "
                             "which a full rebuild ingests again", _published_fetch(paths, snapshot_id)))
    recorded = recorded_files(paths.current.resolve()) if paths.current.is_dir() else {}
    found = damaged_files(paths)
    if found is None:
        found = [(FILE_RECORD, "missing or unreadable, so no published file can be vouched for")]
    if found:
        repair = refresh_again(paths)
        damage += [Damage(paths.current / name, problem, repair) for name, problem in found]
    return Verified(len(recorded or {}), len(snapshot_ids), archived_files, damage)


def _problems(paths: Paths, snapshot_id: str) -> list[str]:
    try:
        return list(archive_problems(paths, snapshot_id, full=True))
    except PipelineError as error:  # a manifest that reads but names no snapshot's files
        return [str(error)]


def _published_fetch(paths: Paths, snapshot_id: str) -> str:
    """fetch_again, falling back on the source and commit the published snapshots table records for it."""
    known = None
    if (path := paths.parquet_files("snapshots").get(snapshot_id)) is not None:
        import pyarrow.parquet as pq

        with suppress(OSError, ValueError, IndexError):  # a damaged file is named below: the placeholder then
            row = pq.read_table(path, columns=["source", "commit"], partitioning=None).to_pylist()[0]
            known = (row["source"], row["commit"])
    return fetch_again(paths, snapshot_id, known)


def refresh_again(paths: Paths) -> str:
    """The refresh that builds the published files again as they were: the published build's snapshots,
    index and parameters, from its refresh record (a refresh with them repairs what is damaged and changes
    nothing else). A build made by the single steps has no record: then any refresh."""
    import json

    generic = f"{command_name()} refresh --source FOLDER_OR_URL{out_option(paths.out)}"
    try:
        record = json.loads((paths.current / REFRESH_RECORD).read_bytes())
        snapshots, index = dict(record["snapshots"]), record["index"]
    except (OSError, ValueError, TypeError, KeyError):
        return generic
    manifests = {}
    for snapshot_id in snapshots:
        with suppress(PipelineError):  # a copy that is gone is named above, with its own repair
            manifests[snapshot_id] = read_manifest(paths.raw_snapshot(snapshot_id))
    if not manifests or (index != "newest" and index not in manifests):
        return generic

    def commit_order(snapshot_id: str) -> tuple[str, str, str]:  # as the history orders them
        commit_time = manifests[snapshot_id]["upstream"].get("commit_time")
        return (commit_moment(commit_time).isoformat() if commit_time else "", manifests[snapshot_id]["retrieved"],
                snapshot_id)

    chosen = index if index in manifests else max(manifests, key=commit_order)
    source, commit = manifests[chosen]["source"], manifests[chosen]["upstream"].get("commit")
    words = [f"--commit {commit}" if settings.is_url(source) and commit else f"--source {shlex.quote(source)}"]
    if index != "newest":
        words.append("--as-index")
    if record.get("itl_deadline_ms") != settings.ITL_DEADLINE_MS.default:
        words.append(f"--itl-deadline-ms {record['itl_deadline_ms']!r}")
    if record.get("latency_tiers") != file_sha256(settings.LATENCY_TIERS.default):
        words.append("--latency-tiers FILE")  # only its digest is recorded: the file it was built with
    words += [f"--{name.replace('_', '-')} {record[name]}" for name in ("as_of", "retrieved") if record.get(name)]
    return f"{command_name()} refresh {' '.join(words)}{out_option(paths.out)}"
