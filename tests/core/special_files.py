"""Things at a path that are not regular files (issue 26, item 3), which the readers' tests put where a file goes."""
import os
import socket

KINDS = ["fifo", "device", "socket", "link to fifo", "link to device"]
WORDS = {"fifo": "FIFO", "device": "character device", "socket": "socket", "link to fifo": "FIFO",
         "link to device": "character device"}
_SOCKETS: list[socket.socket] = []  # kept open while the tests run


def make(path, kind, tmp_path):
    """Put a thing of ``kind`` at ``path`` (replacing a file there)."""
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")  # the device itself (a link to it is what a user can make)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        _SOCKETS.append(sock)
    elif kind == "link to fifo":
        os.mkfifo(tmp_path / "elsewhere.fifo")
        path.symlink_to(tmp_path / "elsewhere.fifo")
    else:
        path.symlink_to("/dev/null")
    return path
