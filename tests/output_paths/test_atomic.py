"""Atomic writes under the policy: files and staged directories, whole or not at all."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from attnkit.errors import OutputError, UsageError
from attnkit.output_paths import atomic_file, staged_directory, write_text


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name or ".old-" in p.name)


def test_write_text_replaces_a_file_and_keeps_its_permissions(tmp_path):
    path = tmp_path / "hyp.txt"
    path.write_text("old\n")
    path.chmod(0o640)
    write_text(path, "new\n")
    assert path.read_text() == "new\n"
    assert path.stat().st_mode & 0o777 == 0o640
    assert _leftovers(tmp_path) == []


def test_a_new_file_gets_the_usual_permissions_and_its_parents(tmp_path):
    old = os.umask(0o022)
    try:
        path = write_text(tmp_path / "a" / "b" / "new.txt", "x")
    finally:
        os.umask(old)
    assert path.read_text() == "x" and path.stat().st_mode & 0o777 == 0o644


def test_a_link_keeps_pointing_at_its_replaced_target(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_the_temporary_keeps_the_suffix_and_vanishes_on_error(tmp_path):
    path = tmp_path / "map.png"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_file(path) as tmp:
        assert tmp.suffix == ".png" and tmp.parent == tmp_path
        tmp.write_bytes(b"half")
        raise RuntimeError("drawing failed")
    assert path.read_bytes() == b"old" and _leftovers(tmp_path) == []


def test_a_full_disk_is_one_line_naming_the_path_and_the_old_file_survives(tmp_path, monkeypatch):
    path = tmp_path / "hyp.txt"
    path.write_text("precious\n")
    real_write_text = Path.write_text

    def full(self, *args, **kwargs):
        if ".tmp-" in self.name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OutputError) as e:
        write_text(path, "new\n", option="--hyp-out")
    assert str(e.value).startswith(f"--hyp-out {path}: cannot write (no space left on device)")
    monkeypatch.undo()
    assert path.read_text() == "precious\n" and _leftovers(tmp_path) == []


def test_a_path_that_became_a_directory_meanwhile_is_still_refused(tmp_path):
    path = tmp_path / "out.txt"
    with pytest.raises(UsageError), atomic_file(path) as tmp:
        tmp.write_text("x")
        path.mkdir()
    assert path.is_dir() and _leftovers(tmp_path) == []


def test_a_staged_directory_appears_whole_and_replaces_only_with_overwrite(tmp_path):
    out = tmp_path / "export"
    with staged_directory(out) as tmp:
        (tmp / "a.json").write_text("{}")
        assert not out.exists()
    assert sorted(p.name for p in out.iterdir()) == ["a.json"]
    assert out.stat().st_mode & 0o777 == 0o777 & ~_umask()
    with pytest.raises(UsageError, match="pass --overwrite"), staged_directory(out):
        pass
    with staged_directory(out, overwrite=True) as tmp:
        (tmp / "b.json").write_text("{}")
    assert sorted(p.name for p in out.iterdir()) == ["b.json"]
    assert _leftovers(tmp_path) == []


def test_a_failed_staged_directory_leaves_the_old_one(tmp_path):
    out = tmp_path / "export"
    out.mkdir()
    (out / "old.json").write_text("{}")
    with (
        pytest.raises(OutputError, match="no space left"),
        staged_directory(out, overwrite=True) as tmp,
    ):
        (tmp / "half").write_text("x")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp / "half"))
    assert sorted(p.name for p in out.iterdir()) == ["old.json"]
    assert _leftovers(tmp_path) == []


def test_staged_directory_keeps_its_interop_import_path():
    from attnkit.interop import outdir

    assert outdir.staged_directory is staged_directory


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_swap_never_replaces_a_file_a_device_or_a_link(tmp_path):
    """``swap_directory`` is the last guard for every checkpoint and export: whatever its
    caller checked, a target that is not a directory is refused before anything moves."""
    import stat as stat_module

    from attnkit.output_paths import swap_directory

    device = tmp_path / "device"
    os.mknod(device, 0o666 | stat_module.S_IFCHR, os.makedev(1, 3))
    file = tmp_path / "file"
    file.write_text("x")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    for target, kind in ((device, "character device"), (file, "regular file"),
                         (link, "symbolic link")):  # fmt: skip
        staged = tmp_path / ".staged"
        staged.mkdir()
        with pytest.raises(UsageError, match=f"is a {kind}, not a directory"):
            swap_directory(staged, target)
        staged.rmdir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["device", "file", "link"]
    assert stat_module.S_ISCHR(device.lstat().st_mode) and file.read_text() == "x"
