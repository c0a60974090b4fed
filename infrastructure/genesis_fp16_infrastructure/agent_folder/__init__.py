"""The one owner of an agent's state folder: its layout (``layout``: every name, once),
one hardened reader, one atomic writer and one policy for an unusable file (``files``:
set aside as ``<name>.unusable-<UTC time>``, bounded, reported once), and one ``flock``
(``lock``).

A component: it names no agent and imports no recipe. Every state-file read and write of
the library and the daemon goes through it.
"""
