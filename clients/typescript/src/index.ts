// The TypeScript client for cordon: sandboxes for AI agents' tool calls on a
// cordon daemon (CORDON_HOST, CORDON_API_KEY). Shaped as E2B's SDK.
export { ALL_TRAFFIC, Sandbox, Commands, CommandHandle, Files, Paginator, Pty, WatchHandle } from "./sandbox.js";
export type { ProcessInfo, SandboxOpts, SandboxInfo, SandboxMetrics, SandboxQuery, SnapshotInfo, RunOpts, EntryInfo, FileType, FilesystemEvent } from "./sandbox.js";
export {
  SandboxError,
  TimeoutError,
  NotFoundError,
  AuthenticationError,
  InvalidArgumentError,
  RateLimitError,
  NotEnoughSpaceError,
  CommandExitError,
} from "./errors.js";
export type { CommandResult } from "./errors.js";
export type { ConnectionOpts } from "./transport.js";
