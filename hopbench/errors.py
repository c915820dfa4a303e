"""The error tree. Library exceptions are translated into these at the boundary
(transports, config loading); the CLI prints one line for a HopbenchError and exits
non-zero. Anything else is a bug and keeps its traceback."""


class HopbenchError(Exception):
    """Base of every error a user can cause or meet."""

    exit_code = 2


class ConfigError(HopbenchError):
    """A config file, flag or plan is invalid (names the key and the file)."""


class TransportError(HopbenchError):
    """Something went wrong moving bytes."""

    exit_code = 3


class TransportUnavailable(TransportError):
    """The transport's library is not installed; the message carries the install line."""


class ConnectFailed(TransportError):
    """The peer could not be reached, or a listener could not bind."""


class PeerClosed(TransportError):
    """The peer closed the connection (end of stream) before a message was whole."""


class Timeout(TransportError):
    """A blocking call did not complete within its timeout."""


class ProtocolError(HopbenchError):
    """The peer sent bytes that break the wire protocol (docs/PROTOCOL.md)."""

    exit_code = 4


class PeerError(ProtocolError):
    """The peer reported an error (an ERROR frame, on the control or the data stream)."""


class Refused(ProtocolError):
    """The server refused the plan or the session (the reason is the server's)."""


class VerifyError(ProtocolError):
    """A reply did not answer its own request (wrong, stale or corrupted ids)."""


class DiskFull(HopbenchError):
    """A result file could not be written: its filesystem is full (or over quota). What was
    written whole before it stays as it was (every result file is replaced atomically)."""
