// Errors, named as E2B's SDK names them, so that code written for it
// catches the same things.

export class SandboxError extends Error {
  constructor(message: string, readonly code?: string, readonly status?: number) {
    super(message);
    this.name = new.target.name;
  }
}
export class TimeoutError extends SandboxError {}
export class NotFoundError extends SandboxError {}
export class AuthenticationError extends SandboxError {}
export class InvalidArgumentError extends SandboxError {}
export class RateLimitError extends SandboxError {}
/** The sandbox's writable space is full (its disk limit); the file was left as it was. */
export class NotEnoughSpaceError extends SandboxError {}

export interface CommandResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  error?: string;
  signal?: string;
}

/** A command ended with a non-zero exit code (commands.run throws it, as E2B's does). */
export class CommandExitError extends SandboxError implements CommandResult {
  readonly stdout: string;
  readonly stderr: string;
  readonly exitCode: number;
  readonly error?: string;
  readonly signal?: string;
  constructor(readonly result: CommandResult) {
    super(`command exited with code ${result.exitCode}${result.stderr.trim() ? ": " + result.stderr.trim().slice(-500) : ""}`, "exit");
    this.stdout = result.stdout;
    this.stderr = result.stderr;
    this.exitCode = result.exitCode;
    this.error = result.error;
    this.signal = result.signal;
  }
}

/** The error for a refusal: the daemon's {"error": code, "message": ...}. */
export function fromResponse(status: number, body: string): SandboxError {
  let code: string | undefined;
  let message = body.slice(0, 500);
  try {
    const doc = JSON.parse(body);
    code = doc.error;
    message = doc.message ?? "";
  } catch {
    /* not JSON: the text as it is */
  }
  const text = `${code ?? "error"} (${status}): ${message}`;
  if (status === 404) return new NotFoundError(text, code, status);
  if (status === 401 || status === 403) return new AuthenticationError(text, code, status);
  if (status === 429) return new RateLimitError(text, code, status);
  if (status === 507) return new NotEnoughSpaceError(text, code, status);
  if (status === 400 || status === 413 || status === 422) return new InvalidArgumentError(text, code, status);
  if (status === 504 || code === "deadline") return new TimeoutError(text, code, status);
  return new SandboxError(text, code, status);
}
