"""LibreOffice's work folder, ``$TMPDIR/swfs-soffice-<uid>``, is used only
when it is a real folder of this uid closed to others: anyone can create
that name first in a shared /tmp, or swap it for a link to their own
folder, to read or fake every conversion (issue 35)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from parsers import soffice


@pytest.fixture
def tmpdir_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _planned(tmp: Path) -> Path:
    return tmp / f"swfs-soffice-{os.getuid()}"


def test_a_private_folder_of_ours_is_used(tmpdir_here: Path) -> None:
    base = soffice._base_dir()
    assert base == str(_planned(tmpdir_here))
    st = os.lstat(base)
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) & 0o077 == 0


def test_an_open_folder_is_not_used(tmpdir_here: Path) -> None:
    planted = _planned(tmpdir_here)
    planted.mkdir()
    planted.chmod(0o777)
    base = soffice._base_dir()
    assert base != str(planted)
    assert stat.S_IMODE(os.lstat(base).st_mode) & 0o077 == 0


def test_a_link_to_another_folder_is_not_used(tmpdir_here: Path) -> None:
    elsewhere = tmpdir_here / "attacker"
    elsewhere.mkdir(mode=0o700)
    _planned(tmpdir_here).symlink_to(elsewhere)
    base = soffice._base_dir()
    assert os.path.realpath(base) != str(elsewhere)
    assert not os.path.islink(base)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to plant another user's folder")
def test_another_users_folder_is_not_used(tmpdir_here: Path) -> None:
    planted = _planned(tmpdir_here)
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)
    base = soffice._base_dir()
    assert base != str(planted)
    assert os.lstat(base).st_uid == os.getuid()
