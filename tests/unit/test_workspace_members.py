"""The workspace is one part among the engine's parts (issue #39): the file
table, the write protocol and the bytes it keeps.  Versions, snapshots, the
baseline and restore are the history part's (``swfs.history.part``); who may
read what, and the mount's journal, the evidence part's
(``swfs.evidence.part``).  Counted as ``test_engine_members`` counts the
engine: inherited members and instance attributes too.

MAX_MEMBERS only shrinks: a member added to ``Workspace`` for one caller
belongs on the part it is about."""

from __future__ import annotations

from swfs.evidence.part import Evidence
from swfs.history.part import History
from swfs.workspace import Workspace
from tests.unit.test_engine_members import public_members

MAX_MEMBERS = 56  # 82 before history, evidence and the views became parts


def test_workspace_has_at_most_max_public_members() -> None:
    members = public_members(Workspace)
    assert len(members) <= MAX_MEMBERS, (
        f"Workspace has {len(members)} public members (at most {MAX_MEMBERS}): {sorted(members)}"
    )


def test_history_and_evidence_live_in_their_parts() -> None:
    history = {
        "versions",
        "version_ref",
        "version_file",
        "versioned_paths",
        "has_versions",
        "pin_version",
        "snapshots",
        "snapshot_manifest",
        "snapshot",
        "set_baseline",
        "restore",
    }
    evidence = {"access", "content_access", "snapshot_accesses", "attach_journal"}
    assert history <= public_members(History)
    assert evidence <= public_members(Evidence)
    assert not (history | evidence) & public_members(Workspace), "one home per member"


def test_parts_are_composed_not_inherited() -> None:
    assert History.__mro__ == (History, object)
    assert Evidence.__mro__ == (Evidence, object)
