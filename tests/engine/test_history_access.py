"""History keeps its permissions, without FUSE: versions, baseline diffs,
stale views, snapshots and worlds answer with the owner and mode recorded
then, narrowed by the present ones (swfs.permissions)."""

from __future__ import annotations

import os
from pathlib import Path

from swfs.api import Access, RelPath
from swfs.engine import Engine
from swfs.history import snapshots as history
from swfs.history.world import open_world
from swfs.permissions import then_and_now

UID, GID = os.geteuid(), os.getegid()


def test_a_file_opened_later_keeps_its_old_content_closed(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "closed").mkdir(parents=True)
    (src / "closed").chmod(0o700)
    secret = src / "secret.env"
    secret.write_text("PASSWORD=old\n")
    secret.chmod(0o600)
    (src / "closed" / "inner.txt").write_text("inside a closed folder\n")
    rel = RelPath("secret.env")
    with Engine.open(src) as ws:
        ws.scan()
        ws.history.set_baseline()
        history.take_snapshot(ws.workspace, "then")
        secret.write_text("PASSWORD=new\n")
        ws.scan()
        secret.chmod(0o644)
        ws.scan()
        now = ws.evidence.access(rel)
        assert now == Access(UID, GID, 0o644)
        versions = ws.history.versions(rel)
        assert [v.access for v in versions] == [Access(UID, GID, 0o600)] * 2
        assert then_and_now(versions[0].access or now, now).mode == 0o600
        assert ws.reviews.review_diff_access(rel).mode == 0o600
        assert ws.reviews.review_access().mode & 0o044 == 0  # ALL.diff: not for others
        old = versions[0].hash
        assert ws.evidence.content_access(rel, old).mode == 0o600  # a stale view of the old bytes
        assert ws.evidence.content_access(rel, versions[-1].hash).mode == 0o644  # the present bytes
        recorded = ws.evidence.snapshot_accesses("then")
        assert recorded[rel].mode == 0o600
        assert recorded[RelPath("closed")].mode == 0o700
        assert recorded[RelPath("")].mode == os.stat(src).st_mode & 0o7777
        # The closed folder goes; the world of then shows it closed.
        os.unlink(src / "closed" / "inner.txt")
        os.rmdir(src / "closed")
        ws.scan()
    with open_world(src, src / ".swfs", "then") as world:
        assert world.access(RelPath("closed")) == Access(UID, GID, 0o700)
        assert world.access(RelPath("closed/inner.txt")) is not None
        # Recorded 0600, 0644 now: the stricter.
        assert world.access(rel) == Access(UID, GID, 0o600)
        assert world.access(RelPath("no/such")) is None


def test_records_without_modes_are_owner_only(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "open").mkdir(parents=True)
    (src / "open").chmod(0o755)
    (src / "open" / "a.txt").write_text("a\n")
    (src / "open" / "a.txt").chmod(0o644)
    rel = RelPath("open/a.txt")
    with Engine.open(src) as ws:
        ws.scan()
        history.take_snapshot(ws.workspace, "old")
        # As an older swfs wrote them: five-item versions, no folder modes.
        with ws.workspace.store.write() as txn:
            ws.workspace.store.put_versions(
                txn, rel, [v[:5] for v in ws.workspace.store.get_versions(rel, txn)]
            )
            info = history.snapshot_info(ws.workspace, "old", txn)
            del info["dir_modes"]
            history._put_info(txn, ws.workspace, "old", info)
        owner = os.stat(src / ".swfs")
        only = Access(owner.st_uid, owner.st_gid, 0o600)
        assert [v.access for v in ws.history.versions(rel)] == [only]
        recorded = ws.evidence.snapshot_accesses("old")
        assert recorded[RelPath("open")] == Access(owner.st_uid, owner.st_gid, 0o700)
        assert recorded[rel].mode == 0o644  # a manifest always kept file modes
    with open_world(src, src / ".swfs", "old") as world:
        assert world.access(RelPath("open")) == Access(owner.st_uid, owner.st_gid, 0o700)
        assert world.access(RelPath("")) == Access(owner.st_uid, owner.st_gid, 0o700)


def test_a_save_by_rename_records_the_access_of_then(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    notes = src / "notes.txt"
    notes.write_text("first\n")
    notes.chmod(0o640)
    rel = RelPath("notes.txt")
    with Engine.open(src) as ws:
        ws.scan()
        tmp = src / "notes.txt.swp"
        tmp.write_text("second\n")
        tmp.chmod(0o640)
        ws.scan()
        os.rename(tmp, notes)  # an editor's save: write a temp file, rename it over
        ws.workspace.record_rename(RelPath("notes.txt.swp"), rel)
        versions = ws.history.versions(rel)
        assert len(versions) == 2
        assert [v.access for v in versions] == [Access(UID, GID, 0o640)] * 2
