"""``make demo``: the whole story on a bundled sample workspace.

Builds a sample workspace (a 12-page PDF, a two-sheet workbook with formulas,
a docx, a pptx, text files), mounts it, and walks through what an agent
does: grep over ``.parsed``, an edit of a spreadsheet cell through the
mount, the stale-then-current transition, the review diff and the versions.
Without FUSE it falls back to ``swfs index`` and ``swfs show``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from swfs.samples import build_sample_workspace

ROOT = Path("demo-workspace")


def say(text: str) -> None:
    sys.stdout.write(f"\n# {text}\n")
    sys.stdout.flush()


def run(*cmd: str | Path, check: bool = True, cwd: Path | None = None) -> str:
    argv = [str(c) for c in cmd]
    shown = " ".join(shlex.quote(a) for a in argv)
    where = f"(in {cwd}) " if cwd else ""
    sys.stdout.write(f"{where}$ {shown}\n")
    sys.stdout.flush()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=300)
    sys.stdout.write(proc.stdout)
    if proc.stderr:
        sys.stdout.write(proc.stderr)
    sys.stdout.flush()
    if check and proc.returncode != 0:
        raise SystemExit(f"demo: `{shown}` failed with exit status {proc.returncode}")
    return proc.stdout


def swfs(*args: str | Path, check: bool = True) -> str:
    exe = Path(sys.executable).with_name("swfs")
    return run(exe, *args, check=check)


def fuse_available() -> bool:
    return os.path.exists("/dev/fuse") and shutil.which("fusermount3") is not None


def header_of(path: Path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.readline().rstrip("\n")


def edit_cell(path: Path, sheet: str, cell: str, value: float) -> None:
    import openpyxl

    wb = openpyxl.load_workbook(path)
    wb[sheet][cell] = value
    wb.save(path)


def demo_mounted(src: Path, mnt: Path) -> None:
    say("Mount the workspace: native files plus .parsed, .review and .versions")
    swfs("mount", src, mnt)
    try:
        run("ls", "-A", mnt)
        swfs("sync", mnt)
        say("grep finds evidence inside the PDF, with its page as the file name")
        run("grep", "-rn", "Churn in the EMEA", ".parsed", cwd=mnt)
        say("...and inside the workbook, with sheet and cell address")
        run("grep", "-rn", "Sheet1!B12", ".parsed", cwd=mnt)
        say("Every unit starts with a header line: provenance and freshness")
        unit = mnt / ".parsed" / "budget.xlsx" / "sheet-Sheet1.md"
        sys.stdout.write(header_of(unit) + "\n")
        say("Edit Sheet1!B12 from 1200 to 1350 with openpyxl, saving in place through the mount")
        sys.stdout.write(f"$ python: openpyxl load {mnt / 'budget.xlsx'}; B12 = 1350; save\n")
        edit_cell(mnt / "budget.xlsx", "Sheet1", "B12", 1350)
        fresh = os.getxattr(mnt / "budget.xlsx", "user.sw.freshness").decode()
        sys.stdout.write(f"user.sw.freshness right after the save: {fresh}\n")
        sys.stdout.write(header_of(unit) + "\n")
        say("Wait for the background re-parse")
        t0 = time.monotonic()
        swfs("sync", mnt)
        sys.stdout.write(f"(current after {time.monotonic() - t0:.2f} s)\n")
        sys.stdout.write(header_of(unit) + "\n")
        run("grep", "-n", "B12", ".parsed/budget.xlsx/sheet-Sheet1.md", cwd=mnt)
        say("The review: what changed since the baseline, cell by cell")
        run("cat", ".review/SUMMARY.md", cwd=mnt)
        run("cat", ".review/budget.xlsx.diff", cwd=mnt)
        say("Every recorded version, as read-only bytes")
        run("ls", "-l", ".versions/budget.xlsx", cwd=mnt)
        swfs("versions", mnt, "budget.xlsx")
        swfs("status", mnt)
    finally:
        say("Unmount")
        swfs("umount", mnt, check=False)


def demo_unmounted(src: Path) -> None:
    say("No FUSE here: index the workspace and show its parsed views")
    swfs("index", src)
    swfs("show", src, "reports/q3-report.pdf")
    swfs("show", src, "budget.xlsx")
    swfs("status", src)


def main() -> None:
    src = ROOT / "src"
    mnt = ROOT / "mnt"
    if mnt.exists() and os.path.ismount(mnt):
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False)
    shutil.rmtree(ROOT, ignore_errors=True)
    src.mkdir(parents=True)
    mnt.mkdir()
    say(f"Build a sample workspace in {src}")
    build_sample_workspace(src)
    run("find", src, "-type", "f")
    if fuse_available():
        demo_mounted(src.resolve(), mnt.resolve())
    else:
        demo_unmounted(src)
    say("Done.  Try it on your own folder: swfs mount FOLDER MOUNTPOINT")


if __name__ == "__main__":
    main()
