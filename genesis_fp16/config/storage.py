"""Errors of the disk under the state folder: full, read-only, over quota, not ours.

None of them is fixed by training again: the CLI says so in one line naming the path,
and the daemon marks itself degraded until a run writes its checkpoint again.
"""

from __future__ import annotations

import errno

STORAGE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM}
)


def storage_error(exc: BaseException) -> str | None:
    """One line for a storage error, naming the path and the setting; None for others.

    >>> storage_error(OSError(errno.ENOSPC, "No space left on device", "state/x.pt"))
    'cannot write state/x.pt: No space left on device (the state folder, GENESIS_FP16_STATE_DIR)'
    """
    if not isinstance(exc, OSError) or exc.errno not in STORAGE_ERRNOS:
        return None
    where = f" {exc.filename}" if exc.filename else ""
    return f"cannot write{where}: {exc.strerror or exc} (the state folder, GENESIS_FP16_STATE_DIR)"
