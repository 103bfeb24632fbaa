"""Errors, named as E2B's SDK names them, so that code written for it catches
the same things."""


class SandboxException(Exception):
    """Base of every error the client raises."""

    def __init__(self, message, code=None, status=None):
        super().__init__(message)
        self.code = code
        self.status = status


class TimeoutException(SandboxException):
    """A command or a request ran past its timeout."""


class NotFoundException(SandboxException):
    """The sandbox, file or process does not exist."""


class AuthenticationException(SandboxException):
    """The API key is missing or not valid."""


class InvalidArgumentException(SandboxException):
    """The daemon refused a value; the message names it and its range."""


class RateLimitException(SandboxException):
    """A quota of the caller's tenant is used up."""


class NotEnoughSpaceException(SandboxException):
    """The sandbox's writable space is full (its disk limit); the file was
    left as it was."""


class CommandExitException(SandboxException):
    """A command ended with a non-zero exit code (commands.run raises it, as
    E2B's does); the result is on the exception."""

    def __init__(self, result):
        super().__init__(
            "command exited with code %d%s" % (result.exit_code, (": " + result.stderr.strip()[-500:]) if result.stderr.strip() else ""),
            code="exit",
        )
        self.result = result
        self.stdout = result.stdout
        self.stderr = result.stderr
        self.exit_code = result.exit_code
        self.error = result.error


def from_response(status, body):
    """The error for a refusal: the daemon's {"error": code, "message": ...}."""
    import json

    code, message = None, ""
    try:
        doc = json.loads(body)
        code, message = doc.get("error"), doc.get("message", "")
    except (ValueError, AttributeError):
        message = body.decode("utf-8", "replace")[:500] if isinstance(body, bytes) else str(body)[:500]
    text = "%s (%d): %s" % (code or "error", status, message)
    if status == 404:
        cls = NotFoundException
    elif status in (401, 403):
        cls = AuthenticationException
    elif status == 429:
        cls = RateLimitException
    elif status == 507:
        cls = NotEnoughSpaceException
    elif status in (400, 413, 422):
        cls = InvalidArgumentException
    elif status == 504 or code == "deadline":
        cls = TimeoutException
    else:
        cls = SandboxException
    return cls(text, code=code, status=status)
