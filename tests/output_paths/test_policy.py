"""The output-path policy's checks: what may be written, and every refusal naming the path."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from attnkit.errors import UsageError
from attnkit.output_paths import check_output_dir, check_output_file


def _device(tmp_path: Path) -> Path:
    """A character device like /dev/null (CI runs as root, which may mknod)."""
    path = tmp_path / "null"
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")
    return path


def _refused(check, path, **kw) -> str:
    with pytest.raises(UsageError) as e:
        check(path, option="--out", **kw)
    message = str(e.value)
    assert "\n" not in message
    return message


def test_a_device_is_never_replaced(tmp_path):
    device = _device(tmp_path)
    assert "is a character device, not a regular file" in _refused(check_output_file, device)
    assert "character device, not a directory" in _refused(check_output_dir, device)
    assert stat.S_ISCHR(device.lstat().st_mode)


def test_a_fifo_a_socket_and_a_directory_are_refused_as_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "a FIFO (named pipe), not a regular file" in _refused(check_output_file, fifo)
    directory = tmp_path / "d"
    directory.mkdir()
    assert "is a directory, not a regular file" in _refused(check_output_file, directory)
    import socket

    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        assert "a socket" in _refused(check_output_file, sock_path)


def test_a_file_is_refused_as_a_directory(tmp_path):
    file = tmp_path / "f"
    file.write_text("x")
    assert "is a regular file, not a directory" in _refused(check_output_dir, file)


def test_a_link_to_a_regular_file_is_followed_to_its_target(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    assert check_output_file(link) == target.resolve()


def test_dangling_and_odd_links_are_refused(tmp_path):
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    assert "does not exist" in _refused(check_output_file, dangling)
    to_device = tmp_path / "to_null"
    to_device.symlink_to(_device(tmp_path))
    message = _refused(check_output_file, to_device)
    assert "character device (through the link" in message
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert "cannot be followed" in _refused(check_output_file, loop)


def test_an_output_that_is_an_input_is_refused_however_it_is_spelt(tmp_path, monkeypatch):
    src = tmp_path / "src.txt"
    src.write_text("one\n")
    (tmp_path / "link").symlink_to(src)
    monkeypatch.chdir(tmp_path)
    for spelling in ("src.txt", "./src.txt", str(src), "link", "../" + tmp_path.name + "/src.txt"):
        message = _refused(check_output_file, spelling, inputs=["src.txt"])
        assert "is also an input of this command" in message


def test_a_file_inside_an_input_directory_is_refused(tmp_path):
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"x")
    message = _refused(check_output_file, checkpoint / "model.safetensors", inputs=[checkpoint])
    assert "lies inside the input" in message
    assert check_output_file(tmp_path / "beside.txt", inputs=[checkpoint])


def test_nothing_is_written_inside_an_input_checkpoint(tmp_path):
    """export --to hf --out CKPT/hf wrote into the checkpoint it read."""
    checkpoint = tmp_path / "run" / "checkpoints" / "step_1"
    checkpoint.mkdir(parents=True)
    (tmp_path / "link").symlink_to(checkpoint)
    for out in (checkpoint / "hf", checkpoint / "new" / "deeper", tmp_path / "link" / "hf"):
        for check in (check_output_dir, check_output_file):
            message = _refused(check, out, checkpoints=[checkpoint])
            assert f"lies inside the input {checkpoint}" in message
    assert "is also an input" in _refused(check_output_dir, checkpoint, checkpoints=[checkpoint])
    # Beside it in its run is fine, and so is a run under an input that is not a model
    # (the data directory).
    assert check_output_dir(tmp_path / "run" / "hf", checkpoints=[checkpoint])
    assert check_output_dir(tmp_path / "run" / "new", inputs=[tmp_path / "run"])


def test_a_directory_holding_an_input_is_refused(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / "step_1").mkdir(parents=True)
    message = _refused(check_output_dir, run, inputs=[run / "checkpoints" / "step_1"])
    assert "holds the input" in message
    assert "is also an input" in _refused(check_output_dir, run, inputs=[run])
    # A new directory inside a run is fine (average --run R --out R/averaged).
    assert check_output_dir(run / "averaged", inputs=[run / "checkpoints" / "step_1"])


def test_parents_a_file_in_the_way_and_an_unwritable_parent(tmp_path, monkeypatch):
    assert check_output_file(tmp_path / "new" / "deeper" / "x.txt")  # created when written
    blocker = tmp_path / "file"
    blocker.write_text("x")
    message = _refused(check_output_file, blocker / "x.txt")
    assert f"{blocker} is a file, not a directory" in message
    # Root may write anywhere; the check asks access(2), as it does for a user.
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    message = _refused(check_output_dir, tmp_path / "out")
    assert f"cannot write in {tmp_path}" in message and "permission denied" in message


def test_an_empty_path_is_refused():
    assert "empty path" in _refused(check_output_file, "")
