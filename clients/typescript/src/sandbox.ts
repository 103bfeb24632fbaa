// Sandbox, commands and files, shaped as E2B's JavaScript SDK, so that
// moving an agent to cordon is a change of import and host.
import type http from "node:http";
import { CommandExitError, CommandResult, InvalidArgumentError, NotFoundError, SandboxError, TimeoutError } from "./errors.js";
import { ConnectionOpts, Transport, isStream, lines, readAll } from "./transport.js";

const DEFAULT_SANDBOX_TIMEOUT_MS = 300_000;
const DEFAULT_COMMAND_TIMEOUT_MS = 60_000;
/** A sandbox's ceiling on its commands' timeouts unless its create set one. */
const DEFAULT_MAX_TIMEOUT_MS = 30 * 60_000;

const sbPath = (id: string, rest = "") => "/v1/sandboxes/" + encodeURIComponent(id) + rest;

export interface SandboxOpts extends ConnectionOpts {
  /** An OCI image (E2B's template). */
  template?: string;
  /** How long the sandbox may live, in milliseconds (default 300000). */
  timeoutMs?: number;
  metadata?: Record<string, string>;
  envs?: Record<string, string>;
  tier?: string;
  memoryMb?: number;
  /** Hosts the sandbox may reach (host or host:port); none when empty. */
  allow?: string[];
  /** Any public address (E2B's word); private, loopback and metadata addresses stay refused. Not with allow. */
  allowInternetAccess?: boolean;
  /**
   * E2B's network options. cordon's egress is an allowlist: denyOut may deny all traffic (ALL_TRAFFIC, or ::/0), with allowOut the hosts and addresses still reached
   * (as allow takes them: host, host:port, IP or CIDR; 80 and 443 without a port); with nothing denied every public address is reached, as E2B's default.
   * A narrower denyOut, allowOut with nothing denied, or another option is refused. Not with allow or allowInternetAccess.
   */
  network?: { allowOut?: string[]; denyOut?: string[] };
  pool?: string;
  /** Restore this snapshot's state into the new sandbox (its spec too, unless given). */
  snapshot?: string;
  /** Make it from a saved template. */
  templateName?: string;
  /** Keep its files (workspace, home, /tmp) on a disk of its own, so that stop() and start() keep them, across daemon restarts and host reboots. */
  persistent?: boolean;
  /** The writable space (workspace, home, /tmp), in MiB: a persistent disk's size (its quota), else memory; full, a write is NotEnoughSpaceError. The daemon's default without. */
  diskMb?: number;
  /** With persistent: start it again when the daemon starts and finds it stopped though it was running (a reboot). */
  autostart?: boolean;
}

export interface SnapshotInfo {
  snapshotId: string;
  source: string;
  size: number;
  files: number;
  paths: string[];
  createdAt?: string;
  expiresAt?: string;
}

function snapshotInfo(s: any): SnapshotInfo {
  return { snapshotId: s.id, source: s.source ?? "", size: s.size ?? 0, files: s.files ?? 0, paths: s.paths ?? [], createdAt: s.createdAt, expiresAt: s.expiresAt };
}

export interface SandboxInfo {
  sandboxId: string;
  state: string;
  tier: string;
  metadata: Record<string, string>;
  startedAt?: string;
  endAt?: string;
  /** The running agent's boot identity: a new one each time the sandbox starts. */
  bootId?: string;
}

/** E2B's filter of Sandbox.list: the sandboxes that carry every one of metadata's labels, in one of state's states. */
export interface SandboxQuery {
  metadata?: Record<string, string>;
  state?: ("running" | "paused")[];
}

/** What a sandbox uses at one moment, as E2B's SandboxMetrics, with cordon's counts after. memTotal is its memory limit (0: none); memUsed is undefined where its tier does not count memory. */
export interface SandboxMetrics {
  timestamp: Date;
  cpuUsedPct: number;
  cpuCount: number;
  memUsed?: number;
  memTotal: number;
  diskUsed: number;
  diskTotal: number;
  cpuSeconds: number;
  tasks: number;
  tasksLimit: number;
  oomKills?: number;
}

/** A background command as commands.list gives it: the agent's session, with E2B's ProcessInfo fields (tag, cmd, args, envs). */
export interface ProcessInfo {
  id: string;
  pid: number;
  state: string;
  command: string;
  exitCode?: number;
  timeoutMs?: number;
  timedOut?: boolean;
  tag: string;
  cmd: string;
  args: string[];
  /** The agent does not say them back; E2B's may be empty too. */
  envs: Record<string, string>;
}

export interface RunOpts {
  background?: boolean;
  envs?: Record<string, string>;
  cwd?: string;
  /** A foreground command's whole input; in the background, true gives it a standard input of its own (sendStdin, closeStdin), text that and its end. */
  stdin?: string | boolean;
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
  /**
   * End the command after this long (default 60000; 0: as long as the sandbox lets a command run, 30 minutes unless its create said otherwise).
   * A background command has none unless given one: then its process group, what it left running included, is ended that long after its start, and wait() throws TimeoutError.
   * (E2B's ends it after 60 seconds unless told otherwise, which stops many a server; cordon's does not.)
   */
  timeoutMs?: number;
  requestTimeoutMs?: number;
}

/** A command started with background: true; it runs on its own until it exits or is killed. */
export class CommandHandle {
  readonly id: string;
  readonly pid: number;
  /** A terminal's output, followed from its start (Pty.create). */
  private following?: Promise<CommandResult>;
  /** Ends the following (disconnect). */
  private stop?: AbortController;

  constructor(private readonly sb: Sandbox, session: { id: string; pid: number }) {
    this.id = session.id;
    this.pid = session.pid;
  }

  /** @internal */
  path(rest = "") {
    return sbPath(this.sb.sandboxId, "/agent/sessions/" + encodeURIComponent(this.id) + rest);
  }

  /** @internal Follows the output from now on, to the callbacks (a terminal's to onPty as the bytes written); wait() then ends with it. */
  follow(opts: { onStdout?: (d: string) => void; onStderr?: (d: string) => void; onPty?: (d: Uint8Array) => void }): void {
    this.stop = new AbortController();
    this.following = this.stream(opts, this.stop.signal);
    this.following.catch(() => {}); // a caller of wait() sees it
  }

  /** Follows the output (from the start) until the command ends; a non-zero exit throws CommandExitError, an end at its timeout TimeoutError. A terminal's output goes to onPty as the bytes it wrote. */
  async wait(opts: { onStdout?: (d: string) => void; onStderr?: (d: string) => void; onPty?: (d: Uint8Array) => void } = {}): Promise<CommandResult> {
    if (this.following) return this.following;
    return this.stream(opts);
  }

  /**
   * Stops following its output, as E2B's: the callbacks given to run get nothing more once it resolves.
   * The command runs on; wait() or commands.connect(pid) reads its output again from the start.
   */
  async disconnect(): Promise<void> {
    const following = this.following;
    this.stop?.abort();
    this.following = this.stop = undefined;
    await following?.catch(() => {});
  }

  private async stream(opts: { onStdout?: (d: string) => void; onStderr?: (d: string) => void; onPty?: (d: Uint8Array) => void }, signal?: AbortSignal): Promise<CommandResult> {
    let stdout = "";
    let stderr = "";
    // The output comes in chunks of bytes, which may end inside a
    // character: each stream's decoder holds such a character's first
    // bytes until the rest arrives.
    const outText = new TextDecoder();
    const errText = new TextDecoder();
    const take = (stream: string | undefined, text: string) => {
      if (text === "") return;
      if (stream === "stderr") {
        stderr += text;
        opts.onStderr?.(text);
      } else {
        stdout += text;
        opts.onStdout?.(text);
      }
    };
    const disconnected = () => new SandboxError("disconnected from the command before it ended", "disconnected");
    try {
      const res = await this.sb.transport.open("GET", this.path("/output"), { query: { from: 0, follow: 1 }, signal });
      for await (const ev of lines(res)) {
        if (signal?.aborted) break;
        if (ev.type === "output") {
          const bytes = Buffer.from(ev.data ?? "", "base64");
          if (bytes.length) opts.onPty?.(new Uint8Array(bytes));
          take(ev.stream, (ev.stream === "stderr" ? errText : outText).decode(bytes, { stream: true }));
        } else if (ev.type === "end" && ev.done) {
          res.destroy();
          break;
        }
      }
    } catch (e) {
      throw signal?.aborted ? disconnected() : e;
    }
    if (signal?.aborted) throw disconnected();
    take("stdout", outText.decode());
    take("stderr", errText.decode());
    // The output ends once every holder of its pipes closed them; the
    // program itself may end a little later.
    let s = await this.sb.transport.call("GET", this.path("/wait"), { query: { timeoutMs: 30000 } });
    while (s.state === "running") s = await this.sb.transport.call("GET", this.path("/wait"), { query: { timeoutMs: 30000 } });
    const result: CommandResult = { stdout, stderr, exitCode: s.exitCode ?? -1, signal: s.signal || undefined };
    if (s.timedOut) throw new TimeoutError(`the command ran past its timeout (${s.timeoutMs} ms) and was ended`, "timeout");
    if (result.exitCode !== 0) throw new CommandExitError(result);
    return result;
  }

  /** Writes data to its standard input (started with stdin: true), or types it into its terminal, as E2B's. */
  async sendStdin(data: string | Uint8Array): Promise<void> {
    await this.sb.commands.sendStdin(this.id, data);
  }

  /** Writes data, then closes its standard input: it reads its end. */
  async closeStdin(data: string | Uint8Array = ""): Promise<void> {
    await this.sb.commands.closeStdin(this.id, data);
  }

  /** Stops it (KILL) and resolves once it is gone. */
  async kill(): Promise<boolean> {
    try {
      await this.sb.transport.call("POST", this.path("/kill"), { body: { signal: "KILL" } });
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }
}

export class Commands {
  constructor(private readonly sb: Sandbox) {}

  /** Runs cmd with sh -c: the result once it ends (CommandExitError on a non-zero exit, TimeoutError past timeoutMs), or a CommandHandle at once with background: true. */
  run(cmd: string, opts: RunOpts & { background: true }): Promise<CommandHandle>;
  run(cmd: string, opts?: RunOpts & { background?: false }): Promise<CommandResult>;
  async run(cmd: string, opts: RunOpts = {}): Promise<CommandResult | CommandHandle> {
    onlyKnown(opts, RUN_OPTS, "commands.run");
    const t = this.sb.transport;
    if (opts.background) {
      const withStdin = opts.stdin !== undefined && opts.stdin !== false;
      const s = await t.call("POST", sbPath(this.sb.sandboxId, "/agent/sessions"), {
        body: {
          command: "/bin/sh",
          args: ["-c", cmd],
          cwd: opts.cwd ?? "",
          env: opts.envs ?? {},
          ...(withStdin ? { stdin: true } : {}),
          ...(opts.timeoutMs ? { timeoutMs: Math.max(1, Math.round(opts.timeoutMs)) } : {}),
        },
      });
      const h = new CommandHandle(this.sb, s);
      // Its output to the callbacks as it comes, as E2B's.
      if (opts.onStdout || opts.onStderr) h.follow({ onStdout: opts.onStdout, onStderr: opts.onStderr });
      if (typeof opts.stdin === "string") await this.closeStdin(h.id, opts.stdin);
      return h;
    }
    if (opts.stdin === true) throw new SandboxError("stdin: true is for a background command, whose input sendStdin writes; give a foreground command its input as text", "invalid_request");
    const body: Record<string, unknown> = { command: "/bin/sh", args: ["-c", cmd] };
    if (opts.cwd) body.cwd = opts.cwd;
    if (opts.envs) body.env = opts.envs;
    if (typeof opts.stdin === "string") body.stdin = opts.stdin;
    // No limit asked for is the sandbox's ceiling: without timeoutMs the
    // daemon's default, 5 minutes, would hold.
    const asked = opts.timeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
    const timeoutMs = asked > 0 ? Math.max(1, Math.round(asked)) : await this.sb.ceilingMs();
    body.timeoutMs = timeoutMs;
    const res = await t.open("POST", sbPath(this.sb.sandboxId, "/exec"), { body, timeoutMs: opts.requestTimeoutMs });
    let stdout = "";
    let stderr = "";
    let result: any;
    for await (const ev of lines(res)) {
      if (ev.type === "stdout_delta") {
        stdout += ev.data ?? "";
        opts.onStdout?.(ev.data ?? "");
      } else if (ev.type === "stderr_delta") {
        stderr += ev.data ?? "";
        opts.onStderr?.(ev.data ?? "");
      } else if (ev.type === "result") {
        result = ev;
      } else if (ev.type === "error") {
        throw new SandboxError(`the command could not run: ${ev.error}`, "exec");
      }
    }
    if (!result) throw new SandboxError("the command's stream ended without a result");
    const r: CommandResult = { stdout, stderr, exitCode: result.exitCode ?? -1, signal: result.signal || undefined };
    if (result.timedOut) throw new TimeoutError(`the command ran past its timeout (${timeoutMs} ms) and was ended`, "timeout");
    if (r.exitCode !== 0) {
      r.error = `exit status ${r.exitCode}`;
      throw new CommandExitError(r);
    }
    return r;
  }

  /** The background commands the sandbox holds. */
  async list(): Promise<ProcessInfo[]> {
    const doc = await this.sb.transport.call("GET", sbPath(this.sb.sandboxId, "/agent/sessions"));
    return (doc.sessions ?? []).map((p: any) => ({ ...p, tag: p.id, cmd: p.command, args: p.args ?? [], envs: {} }));
  }

  /** Kills a background command by its pid (or its id). */
  async kill(pid: number | string): Promise<boolean> {
    try {
      return await (await this.connect(pid)).kill();
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** Writes data to the standard input of a background command started with stdin: true (or types it into a terminal), as E2B's. */
  async sendStdin(pid: number | string, data: string | Uint8Array): Promise<void> {
    await this.input(pid, data, false);
  }

  /** Writes data, then closes the command's standard input: it reads its end. */
  async closeStdin(pid: number | string, data: string | Uint8Array = ""): Promise<void> {
    await this.input(pid, data, true);
  }

  private async input(pid: number | string, data: string | Uint8Array, end: boolean): Promise<void> {
    const h = await this.connect(pid);
    await this.sb.transport.call("POST", h.path("/input"), { query: end ? { end: 1 } : undefined, body: typeof data === "string" ? new TextEncoder().encode(data) : data });
  }

  /** The background command (or terminal) of that pid (or id). */
  async connect(pid: number | string): Promise<CommandHandle> {
    const s = (await this.list()).find((x) => x.pid === pid || x.id === pid);
    if (!s) throw new NotFoundError(`no background command ${pid}`, "not_found");
    return new CommandHandle(this.sb, s);
  }
}

/** Terminals in the sandbox, as E2B's sandbox.pty: a shell on a terminal of its own, typed into and resized by its pid. */
export class Pty {
  constructor(private readonly sb: Sandbox) {}

  /** Starts bash (else sh), or cmd with sh -c, on a terminal of rows by cols (1 to 4096 each); its output goes to onData as the bytes the terminal wrote, and the handle's wait() ends with it; with timeoutMs it is ended that long after (E2B's default of 60 seconds is not cordon's: a terminal lasts until its program exits or is killed). */
  async create(opts: { cols: number; rows: number; onData: (data: Uint8Array) => void; cwd?: string; envs?: Record<string, string>; cmd?: string; timeoutMs?: number }): Promise<CommandHandle> {
    onlyKnown(opts, ["cols", "rows", "onData", "cwd", "envs", "cmd", "timeoutMs", "requestTimeoutMs"], "pty.create");
    const s = await this.sb.transport.call("POST", sbPath(this.sb.sandboxId, "/agent/sessions"), {
      body: {
        command: "/bin/sh",
        args: ["-c", opts.cmd ?? "command -v bash >/dev/null 2>&1 && exec bash -i || exec sh -i"],
        tty: true,
        rows: opts.rows,
        cols: opts.cols,
        cwd: opts.cwd ?? "",
        env: opts.envs ?? {},
        ...(opts.timeoutMs ? { timeoutMs: Math.max(1, Math.round(opts.timeoutMs)) } : {}),
      },
    });
    const h = new CommandHandle(this.sb, s);
    h.follow({ onPty: opts.onData });
    return h;
  }

  /** Types data into the terminal, as typed ("\x03" is Ctrl-C); at most 1 MiB a call. */
  async sendInput(pid: number | string, data: Uint8Array | string): Promise<void> {
    await this.sb.commands.sendStdin(pid, data);
  }

  /** Sets the terminal's size; the program is told (SIGWINCH). */
  async resize(pid: number | string, size: { cols: number; rows: number }): Promise<void> {
    const h = await this.sb.commands.connect(pid);
    await this.sb.transport.call("POST", h.path("/resize"), { body: { rows: size.rows, cols: size.cols } });
  }

  /** Stops the terminal's program (KILL); false if there is none. */
  async kill(pid: number | string): Promise<boolean> {
    return this.sb.commands.kill(pid);
  }
}

export type FileType = "file" | "dir" | "symlink" | "other";

export interface EntryInfo {
  name: string;
  type: FileType;
  path: string;
  size: number;
  mode: number;
  modifiedTimeMs: number;
  symlinkTarget?: string;
}

export interface FilesystemEvent {
  name: string;
  type: "create" | "write" | "remove" | "rename" | "overflow";
  oldName?: string;
  isDir?: boolean;
}

/** A directory being watched; events go to onEvent as they come. */
export class WatchHandle {
  constructor(private readonly res: http.IncomingMessage) {}
  async stop(): Promise<void> {
    this.res.destroy();
  }
}

/** An EntryInfo from the agent's description of one path. */
function entry(e: any, path: string): EntryInfo {
  return { name: e.name, type: e.type, path: e.path ?? path, size: e.size ?? 0, mode: e.mode ?? 0, modifiedTimeMs: e.mtimeMs ?? 0 };
}

export class Files {
  constructor(private readonly sb: Sandbox) {}

  /** The file's content: text (the default), bytes, or a stream. */
  read(path: string, opts?: { format?: "text" }): Promise<string>;
  read(path: string, opts: { format: "bytes" }): Promise<Uint8Array>;
  read(path: string, opts: { format: "stream" }): Promise<AsyncIterable<Uint8Array>>;
  async read(path: string, opts: { format?: "text" | "bytes" | "stream" } = {}): Promise<string | Uint8Array | AsyncIterable<Uint8Array>> {
    const res = await this.sb.transport.open("GET", sbPath(this.sb.sandboxId, "/files"), { query: { path } });
    if (opts.format === "stream") return res;
    const buf = await readAll(res);
    return opts.format === "bytes" ? new Uint8Array(buf) : buf.toString("utf8");
  }

  /**
   * Writes a file (text, bytes, a Blob, or a stream: a web or Node stream, an async iterable of chunks, sent as it comes without being
   * held whole), making its directories; or, given a list, each of them. Resolves to where the file is in the sandbox. A stream that
   * fails midway rejects with its error and leaves the file as it was.
   */
  write(path: string, data: string | Uint8Array | ArrayBuffer | ArrayBufferView | Blob | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array | string>, opts?: { mode?: number }): Promise<{ name: string; path: string }>;
  write(files: Array<{ path: string; data: string | Uint8Array | ArrayBuffer }>): Promise<Array<{ name: string; path: string }>>;
  async write(pathOrFiles: any, data?: any, opts: { mode?: number } = {}): Promise<any> {
    if (Array.isArray(pathOrFiles)) {
      const out = [];
      for (const f of pathOrFiles) out.push(await this.write(f.path, f.data));
      return out;
    }
    const path: string = pathOrFiles;
    const query: Record<string, string> = { path };
    if (opts.mode !== undefined) query.mode = (opts.mode & 0o777).toString(8);
    const w = await this.sb.transport.call("PUT", sbPath(this.sb.sandboxId, "/files"), { query, body: fileBody(data) });
    const at: string = w?.path ?? path;
    return { name: at.replace(/\/+$/, "").split("/").pop() ?? at, path: at };
  }

  async list(path = "."): Promise<EntryInfo[]> {
    const doc = await this.sb.transport.call("GET", sbPath(this.sb.sandboxId, "/dir"), { query: { path } });
    const base = String(doc.path ?? path).replace(/\/+$/, "");
    return (doc.entries ?? []).map((e: any) => ({ name: e.name, type: e.type, path: base + "/" + e.name, size: e.size ?? 0, mode: e.mode ?? 0, modifiedTimeMs: e.mtimeMs ?? 0, symlinkTarget: e.target }));
  }

  async getInfo(path: string): Promise<EntryInfo> {
    return entry(await this.sb.transport.call("GET", sbPath(this.sb.sandboxId, "/stat"), { query: { path } }), path);
  }

  /** Moves oldPath to newPath (replacing a file there), as E2B's; resolves to what is now at newPath. */
  async rename(oldPath: string, newPath: string): Promise<EntryInfo> {
    return entry(await this.sb.transport.call("POST", sbPath(this.sb.sandboxId, "/rename"), { query: { path: oldPath, to: newPath } }), newPath);
  }

  async exists(path: string): Promise<boolean> {
    try {
      await this.getInfo(path);
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  async makeDir(path: string): Promise<boolean> {
    const existed = await this.exists(path);
    await this.sb.transport.call("POST", sbPath(this.sb.sandboxId, "/dir"), { query: { path } });
    return !existed;
  }

  async remove(path: string): Promise<void> {
    await this.sb.transport.call("DELETE", sbPath(this.sb.sandboxId, "/files"), { query: { path, recursive: 1 } });
  }

  /** Watches a directory; once it resolves, every change is reported to onEvent. */
  async watchDir(path: string, onEvent: (e: FilesystemEvent) => void, opts: { recursive?: boolean } = {}): Promise<WatchHandle> {
    const query: Record<string, string | number> = { path };
    if (opts.recursive) query.recursive = 1;
    const res = await this.sb.transport.open("GET", sbPath(this.sb.sandboxId, "/agent/watch"), { query });
    const events = lines(res);
    // The first event says the watch is in place.
    for (;;) {
      const first = await events.next();
      if (first.done) throw new SandboxError("the watch ended before it was in place");
      if (first.value.type === "ready") break;
    }
    (async () => {
      try {
        for await (const ev of events) {
          if (["create", "write", "remove", "rename", "overflow"].includes(ev.type)) {
            onEvent({ name: ev.path ?? "", type: ev.type, oldName: ev.from, isDir: !!ev.dir });
          }
        }
      } catch {
        /* stopped, or the sandbox went */
      }
    })();
    return new WatchHandle(res);
  }
}

const CONNECTION_OPTS = ["host", "apiKey", "requestTimeoutMs"];
const SANDBOX_OPTS = [...CONNECTION_OPTS, "template", "timeoutMs", "metadata", "envs", "tier", "memoryMb", "allow", "allowInternetAccess", "network", "pool", "snapshot", "templateName", "persistent", "diskMb", "autostart"];
const RUN_OPTS = ["background", "envs", "cwd", "stdin", "onStdout", "onStderr", "timeoutMs", "requestTimeoutMs"];

/** A file's content as the transport sends it: bytes, or a stream (a Blob's, a web or Node stream, an async iterable of chunks), sent as it comes. */
function fileBody(data: unknown): Uint8Array | AsyncIterable<unknown> {
  if (data === undefined || data === null) return new Uint8Array();
  if (typeof data === "string") return new TextEncoder().encode(data);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (typeof Blob !== "undefined" && data instanceof Blob) return data.stream() as unknown as AsyncIterable<unknown>;
  if (isStream(data)) return data;
  throw new InvalidArgumentError("data: a string, bytes (an ArrayBuffer or a typed array), a Blob or a stream of bytes", "invalid_request");
}

/**
 * Refuses an option cordon does not take, naming it: an option of E2B's that cordon lacks (user, lifecycle, mcp, volumeMounts, ...)
 * would otherwise be dropped without a word, and the sandbox or command made without what was asked.
 */
function onlyKnown(opts: object, known: readonly string[], what: string): void {
  const unknown = Object.entries(opts)
    .filter(([k, v]) => v !== undefined && !known.includes(k))
    .map(([k]) => k)
    .sort();
  if (!unknown.length) return;
  const why = unknown.includes("user") ? ": commands run as the sandbox's own user; cordon takes no other per command" : "";
  throw new InvalidArgumentError(`${what} takes no ${unknown.join(", ")}${why}`, "invalid_request");
}

/** E2B's name for every address, in network's denyOut. */
export const ALL_TRAFFIC = "0.0.0.0/0";

/** E2B's network options as a cordon egress policy, as SandboxOpts.network says. */
function networkEgress(network: { allowOut?: string[]; denyOut?: string[] }): Record<string, unknown> {
  const unknown = Object.keys(network).filter((k) => k !== "allowOut" && k !== "denyOut");
  if (unknown.length) throw new InvalidArgumentError(`network takes allowOut and denyOut; cordon has no ${unknown.sort().join(", ")}`, "invalid_request");
  const allowOut = network.allowOut ?? [];
  const denyOut = network.denyOut ?? [];
  if (![...allowOut, ...denyOut].every((h) => typeof h === "string")) throw new InvalidArgumentError("network's allowOut and denyOut are arrays of strings", "invalid_request");
  if (denyOut.some((d) => d !== ALL_TRAFFIC && d !== "::/0")) {
    throw new InvalidArgumentError(`denyOut: cordon's egress is an allowlist; it can deny all traffic (${ALL_TRAFFIC}) with allowOut the exceptions, not a part of it`, "invalid_request");
  }
  if (!denyOut.length) {
    if (allowOut.length) throw new InvalidArgumentError("allowOut names exceptions to denyOut, and nothing is denied: every public address is reached already", "invalid_request");
    return { mode: "allow-all" };
  }
  return allowOut.length ? { mode: "static", rules: allowOut.map(rule) } : { mode: "deny-all" };
}

function rule(h: string) {
  const m = /^([^:]+):(\d+)$/.exec(h);
  return m ? { host: m[1], ports: [Number(m[2])] } : { host: h };
}

/** The daemon's metrics as E2B's SandboxMetrics. */
function metrics(m: any): SandboxMetrics {
  return {
    timestamp: new Date(m.timestamp), cpuUsedPct: m.cpuUsedPct ?? 0, cpuCount: m.cpuCount ?? 0,
    memUsed: m.memoryBytes, memTotal: m.memoryLimitBytes ?? 0, diskUsed: m.diskUsedBytes ?? 0, diskTotal: m.diskTotalBytes ?? 0,
    cpuSeconds: m.cpuSeconds ?? 0, tasks: m.tasks ?? 0, tasksLimit: m.tasksLimit ?? 0, oomKills: m.oomKills,
  };
}

function info(s: any): SandboxInfo {
  return { sandboxId: s.id, state: s.state ?? "", tier: s.spec?.tier ?? "", metadata: s.labels ?? {}, startedAt: s.createdAt, endAt: s.expiresAt, bootId: s.bootId };
}

/**
 * What Sandbox.list and Sandbox.listSnapshots return: awaited, the whole array (as E2B's v1 SDK gave);
 * not awaited, E2B's v2 paginator over it, limit items a page: while (p.hasNext) await p.nextItems().
 */
export class Paginator<T> implements PromiseLike<T[]> {
  private items?: Promise<T[]>;
  private next = 0;
  private started = false;
  private count = 0;

  constructor(private readonly fetch: () => Promise<T[]>, private readonly limit?: number) {
    if (limit !== undefined && !(Number.isInteger(limit) && limit >= 1)) throw new InvalidArgumentError("limit is a whole number of 1 or more", "invalid_request");
  }

  private all(): Promise<T[]> {
    this.items ??= this.fetch().then((items) => {
      this.count = items.length;
      return items;
    });
    return this.items;
  }

  /** Whether nextItems has a page to give (the first, even if empty). */
  get hasNext(): boolean {
    return !this.started || this.next < this.count;
  }

  /** The next page; past the last, SandboxError. */
  async nextItems(): Promise<T[]> {
    if (!this.hasNext) throw new SandboxError("No more items to fetch", "invalid_request");
    this.started = true;
    const items = await this.all();
    const end = this.limit === undefined ? items.length : this.next + this.limit;
    const page = items.slice(this.next, end);
    this.next = Math.min(end, items.length);
    return page;
  }

  then<R1 = T[], R2 = never>(onfulfilled?: ((v: T[]) => R1 | PromiseLike<R1>) | null, onrejected?: ((e: any) => R2 | PromiseLike<R2>) | null): Promise<R1 | R2> {
    return this.all().then(onfulfilled, onrejected);
  }
}

/** A sandbox on a cordon daemon: Sandbox.create() makes one; `await using` kills it at the end of the scope. */
export class Sandbox {
  readonly commands: Commands;
  readonly pty: Pty;
  readonly files: Files;

  private maxTimeoutMs?: number;

  private constructor(readonly sandboxId: string, readonly transport: Transport) {
    this.commands = new Commands(this);
    this.pty = new Pty(this);
    this.files = new Files(this);
  }

  /** The longest timeout the sandbox lets a command have: its create's maxTimeoutMs, else the agent's 30 minutes. */
  async ceilingMs(): Promise<number> {
    this.maxTimeoutMs ??= (await this.transport.call("GET", sbPath(this.sandboxId))).spec?.maxTimeoutMs || DEFAULT_MAX_TIMEOUT_MS;
    return this.maxTimeoutMs!;
  }

  static async create(opts?: SandboxOpts): Promise<Sandbox>;
  static async create(template: string, opts?: SandboxOpts): Promise<Sandbox>;
  static async create(a?: string | SandboxOpts, b?: SandboxOpts): Promise<Sandbox> {
    const opts: SandboxOpts = typeof a === "string" ? { ...b, template: a } : (a ?? {});
    onlyKnown(opts, SANDBOX_OPTS, "Sandbox.create");
    const t = new Transport(opts);
    const body: Record<string, unknown> = { ttlSeconds: Math.ceil((opts.timeoutMs ?? DEFAULT_SANDBOX_TIMEOUT_MS) / 1000) };
    if (opts.template) body.image = opts.template;
    if (opts.tier) body.tier = opts.tier;
    if (opts.envs) body.env = opts.envs;
    const limits: Record<string, number> = {};
    if (opts.memoryMb) limits.memoryBytes = opts.memoryMb * 1024 * 1024;
    if (opts.diskMb) limits.diskBytes = opts.diskMb * 1024 * 1024;
    if (Object.keys(limits).length) body.limits = limits;
    if (opts.persistent) body.persistentWorkspace = true;
    if (opts.autostart) body.autostart = true;
    if (opts.allow?.length && opts.allowInternetAccess) throw new SandboxError("allow and allowInternetAccess: give one (the hosts it may reach, or any public one)", "invalid_request");
    if (opts.network !== undefined) {
      if (opts.allow?.length || opts.allowInternetAccess !== undefined) {
        throw new InvalidArgumentError("network, or allow and allowInternetAccess: give one way to say what the sandbox may reach", "invalid_request");
      }
      body.egress = networkEgress(opts.network);
    } else if (opts.allow?.length) body.egress = { mode: "static", rules: opts.allow.map(rule) };
    else if (opts.allowInternetAccess) body.egress = { mode: "allow-all" };
    if (opts.metadata) body.labels = opts.metadata;
    if (opts.pool) body.pool = opts.pool;
    if (opts.snapshot) body.fromSnapshot = opts.snapshot;
    if (opts.templateName) body.template = opts.templateName;
    const sb = await t.call("POST", "/v1/sandboxes", { body });
    return new Sandbox(sb.id, t);
  }

  /**
   * The sandbox, running: a paused one is thawed and a stopped persistent one started again, as E2B's connect resumes a paused sandbox.
   * With timeoutMs its end is moved to that long from now if that is later than its end was (never sooner). A sandbox that is gone throws NotFoundError.
   */
  static async connect(sandboxId: string, opts: ConnectionOpts & { timeoutMs?: number } = {}): Promise<Sandbox> {
    return new Sandbox(sandboxId, new Transport(opts)).connect({ timeoutMs: opts.timeoutMs });
  }

  /** Sandbox.connect for this sandbox. */
  async connect(opts: { timeoutMs?: number } = {}): Promise<Sandbox> {
    const s = await this.transport.call("GET", sbPath(this.sandboxId));
    if (s.state === "destroyed" || s.state === "destroying") throw new NotFoundError(`sandbox ${this.sandboxId} is ${s.state}`, "not_found");
    if (s.state === "paused" || s.state === "suspended") await this.transport.call("POST", sbPath(this.sandboxId, "/resume"));
    if (opts.timeoutMs && s.expiresAt && Date.parse(s.expiresAt) < Date.now() + opts.timeoutMs) await this.setTimeout(opts.timeoutMs);
    return this;
  }

  /** Sandbox.prototype.pause by the sandbox's id, as E2B's. */
  static async pause(sandboxId: string, opts: ConnectionOpts & { keepMemory?: boolean } = {}): Promise<boolean> {
    return new Sandbox(sandboxId, new Transport(opts)).pause({ keepMemory: opts.keepMemory });
  }

  /** Sandbox.pause, by E2B's earlier name. */
  static async betaPause(sandboxId: string, opts: ConnectionOpts & { keepMemory?: boolean } = {}): Promise<boolean> {
    return Sandbox.pause(sandboxId, opts);
  }

  /**
   * Your sandboxes that are not destroyed; with query (E2B's), those with all its metadata and in one of its states.
   * Awaited, the array (as E2B's v1 SDK gave); not awaited, E2B's v2 paginator over it (hasNext, nextItems(), limit a page).
   */
  static list(opts: ConnectionOpts & { query?: SandboxQuery; limit?: number } = {}): Paginator<SandboxInfo> {
    return new Paginator(async () => {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(opts.query?.metadata ?? {})) q.append("label", `${k}=${v}`);
      const states = opts.query?.state?.length ? new Set<string>(opts.query.state) : undefined;
      const qs = q.toString();
      const doc = await new Transport(opts).call("GET", "/v1/sandboxes" + (qs ? "?" + qs : ""));
      return (doc.sandboxes ?? []).filter((s: any) => s.state !== "destroyed" && (!states || states.has(s.state))).map(info);
    }, opts.limit);
  }

  /** A sandbox's description by its id, as E2B's Sandbox.getInfo. */
  static async getInfo(sandboxId: string, opts: ConnectionOpts = {}): Promise<SandboxInfo> {
    return new Sandbox(sandboxId, new Transport(opts)).getInfo();
  }

  /** Sandbox.prototype.setTimeout by the sandbox's id, as E2B's. */
  static async setTimeout(sandboxId: string, timeoutMs: number, opts: ConnectionOpts = {}): Promise<void> {
    return new Sandbox(sandboxId, new Transport(opts)).setTimeout(timeoutMs);
  }

  /** Sandbox.prototype.getMetrics by the sandbox's id, as E2B's. */
  static async getMetrics(sandboxId: string, opts: ConnectionOpts & { start?: Date; end?: Date } = {}): Promise<SandboxMetrics[]> {
    return new Sandbox(sandboxId, new Transport(opts)).getMetrics({ start: opts.start, end: opts.end });
  }

  /** Sandbox.prototype.updateNetwork by the sandbox's id, as E2B's. */
  static async updateNetwork(sandboxId: string, network: { allowOut?: string[]; denyOut?: string[] }, opts: ConnectionOpts = {}): Promise<void> {
    return new Sandbox(sandboxId, new Transport(opts)).updateNetwork(network);
  }

  /** Replaces what the sandbox may reach with E2B's network options, as create's network takes them: new connections follow at once, and open ones it no longer allows are closed. */
  async updateNetwork(network: { allowOut?: string[]; denyOut?: string[] }): Promise<void> {
    await this.transport.call("PUT", sbPath(this.sandboxId, "/network-policy"), { body: networkEgress(network) });
  }

  /** Sandbox.prototype.kill by the sandbox's id, as E2B's. */
  static async kill(sandboxId: string, opts: ConnectionOpts = {}): Promise<boolean> {
    return new Sandbox(sandboxId, new Transport(opts)).kill();
  }

  async getInfo(): Promise<SandboxInfo> {
    return info(await this.transport.call("GET", sbPath(this.sandboxId)));
  }

  /**
   * What the sandbox used from start to end (its create and now when not given), oldest first, in E2B's shape:
   * the daemon's readings (every 5 seconds, kept for 15 minutes, unless cordon serve was told otherwise), each cpuUsedPct since the reading before;
   * then, when the window reaches now and the sandbox runs, one taken now.
   */
  async getMetrics(opts: { start?: Date; end?: Date } = {}): Promise<SandboxMetrics[]> {
    const query: Record<string, number> = {};
    if (opts.start) query.start = Math.floor(opts.start.getTime() / 1000);
    if (opts.end) query.end = Math.ceil(opts.end.getTime() / 1000);
    const doc = await this.transport.call("GET", sbPath(this.sandboxId, "/metrics/history"), { query });
    const out: SandboxMetrics[] = (doc.metrics ?? []).map(metrics);
    if (!opts.end || opts.end.getTime() >= Date.now()) {
      try {
        out.push(metrics(await this.transport.call("GET", sbPath(this.sandboxId, "/metrics"))));
      } catch (e) {
        if (!(e instanceof SandboxError && e.status === 409)) throw e; // paused or stopped: its readings until then
      }
    }
    return out;
  }

  /** Whether it runs: not paused, stopped or gone, as E2B's. */
  async isRunning(): Promise<boolean> {
    try {
      const s = await this.getInfo();
      return s.state === "running";
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** Destroys the sandbox timeoutMs from now, whatever it is doing, rather than when it was to end: a longer life or a shorter one, as E2B's setTimeout (0: the daemon's default, which may be none; never past the daemon's maximum). */
  async setTimeout(timeoutMs: number): Promise<void> {
    await this.transport.call("PATCH", sbPath(this.sandboxId), { body: { ttlSeconds: Math.ceil(timeoutMs / 1000) } });
  }

  /** Destroys the sandbox; resolves once its teardown is confirmed (false if it was gone already). */
  async kill(): Promise<boolean> {
    try {
      if ((await this.getInfo()).state === "destroyed") return false;
      await this.transport.call("DELETE", sbPath(this.sandboxId));
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /**
   * Pauses the sandbox until connect() (or start()): every process frozen where it is, its memory kept (on the host, not written out, as E2B's is; the sandbox's TTL still runs).
   * keepMemory: false stops a persistent sandbox instead (stop()): its files kept, its processes ended, as E2B's drops the memory of one. False if it was paused (or stopped) already.
   */
  async pause(opts: { keepMemory?: boolean } = {}): Promise<boolean> {
    const keep = opts.keepMemory ?? true;
    if ((await this.getInfo()).state === (keep ? "paused" : "suspended")) return false;
    await this.transport.call("POST", sbPath(this.sandboxId, keep ? "/pause" : "/suspend"));
    return true;
  }

  /** pause(), by E2B's earlier name. */
  async betaPause(opts: { keepMemory?: boolean } = {}): Promise<boolean> {
    return this.pause(opts);
  }

  /** Captures the sandbox's writable state (workspace and home; not its processes, which are stopped for the capture and go on after). */
  async snapshot(opts: { ttlMs?: number } = {}): Promise<SnapshotInfo> {
    const body = opts.ttlMs ? { ttlSeconds: Math.ceil(opts.ttlMs / 1000) } : {};
    return snapshotInfo(await this.transport.call("POST", sbPath(this.sandboxId, "/snapshot"), { body }));
  }

  /** snapshot(), by E2B's name. A cordon snapshot has no name: one given is refused (a template names a spec with a snapshot). */
  async createSnapshot(opts: { name?: string } = {}): Promise<SnapshotInfo> {
    if (opts.name !== undefined) throw new InvalidArgumentError("a cordon snapshot has no name; a template names one (cordon template save)", "invalid_request");
    return this.snapshot();
  }

  /** Stops everything a persistent sandbox runs, keeping its files, until start(). */
  async stop(): Promise<void> {
    await this.transport.call("POST", sbPath(this.sandboxId, "/suspend"));
  }

  /** Starts a stopped persistent sandbox again on its files (a new boot id, nothing of before running). */
  async start(): Promise<void> {
    await this.transport.call("POST", sbPath(this.sandboxId, "/resume"));
  }

  /** New sandboxes (1 to 32) from this one's state as it is now. */
  async fork(count = 1): Promise<Sandbox[]> {
    const doc = await this.transport.call("POST", sbPath(this.sandboxId, "/fork"), { body: { count } });
    return (doc.sandboxes ?? []).map((s: any) => new Sandbox(s.id, this.transport));
  }

  /** Your snapshots: awaited, the array; not awaited, E2B's paginator over it. */
  static listSnapshots(opts: ConnectionOpts & { limit?: number } = {}): Paginator<SnapshotInfo> {
    return new Paginator(async () => {
      const doc = await new Transport(opts).call("GET", "/v1/snapshots");
      return (doc.snapshots ?? []).map(snapshotInfo);
    }, opts.limit);
  }

  static async deleteSnapshot(snapshotId: string, opts: ConnectionOpts = {}): Promise<boolean> {
    try {
      await new Transport(opts).call("DELETE", "/v1/snapshots/" + encodeURIComponent(snapshotId));
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** A URL for a port a program in the sandbox listens on. */
  /** A URL of the daemon that reads the file at path without a key (a browser's link), as E2B's: for useSignatureExpiration seconds, 1 to 86400 (an hour when not given; cordon's always expire). */
  async downloadUrl(path: string, opts: { useSignatureExpiration?: number } = {}): Promise<string> {
    return this.fileUrl(path, "GET", opts);
  }

  /** A URL of the daemon that writes the file at path without a key: POST a form whose part "file" holds its bytes, as E2B's is used, or PUT the bytes as the body. For useSignatureExpiration seconds, 1 to 86400 (an hour when not given). */
  async uploadUrl(path: string, opts: { useSignatureExpiration?: number } = {}): Promise<string> {
    if (!path) throw new InvalidArgumentError("uploadUrl needs the path to write: a cordon file URL names one file", "invalid_request");
    return this.fileUrl(path, "PUT", opts);
  }

  private async fileUrl(path: string, method: string, opts: { useSignatureExpiration?: number }): Promise<string> {
    onlyKnown(opts, ["useSignatureExpiration"], method === "GET" ? "downloadUrl" : "uploadUrl");
    const body: Record<string, unknown> = { path, method };
    if (opts.useSignatureExpiration !== undefined) body.expiresInSeconds = Math.trunc(opts.useSignatureExpiration);
    const u = String((await this.transport.call("POST", sbPath(this.sandboxId, "/file-urls"), { body })).url);
    return u.includes("://") ? u : this.transport.base + u;
  }

  async getHost(port: number): Promise<string> {
    const p = await this.transport.call("POST", sbPath(this.sandboxId, "/ports"), { body: { port } });
    return String(p.url).includes("://") ? p.url : this.transport.base + p.url;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.kill();
  }
}
