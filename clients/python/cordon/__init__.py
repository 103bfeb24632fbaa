"""Python client for cordon: sandboxes for AI agents' tool calls, on a cordon
daemon (CORDON_HOST, CORDON_API_KEY). Shaped as E2B's SDK."""

from .errors import (
    AuthenticationException,
    CommandExitException,
    InvalidArgumentException,
    NotEnoughSpaceException,
    NotFoundException,
    RateLimitException,
    SandboxException,
    TimeoutException,
)
from .sandbox import (
    ALL_TRAFFIC,
    CommandHandle,
    CommandResult,
    EntryInfo,
    FilesystemEvent,
    FilesystemEventType,
    FileType,
    Paginator,
    ProcessInfo,
    Pty,
    PtySize,
    Sandbox,
    SandboxInfo,
    SandboxMetrics,
    SandboxQuery,
    SandboxState,
    SnapshotInfo,
    WatchHandle,
    WriteEntry,
    WriteInfo,
)

__all__ = [
    "ALL_TRAFFIC", "Sandbox", "SandboxInfo", "SandboxMetrics", "SandboxQuery", "SandboxState", "SnapshotInfo", "CommandResult", "CommandHandle", "EntryInfo", "FileType", "WriteInfo",
    "Paginator", "ProcessInfo", "Pty", "PtySize", "WriteEntry",
    "FilesystemEvent", "FilesystemEventType", "WatchHandle", "SandboxException", "TimeoutException",
    "NotFoundException", "AuthenticationException", "InvalidArgumentException", "RateLimitException",
    "NotEnoughSpaceException", "CommandExitException",
]
