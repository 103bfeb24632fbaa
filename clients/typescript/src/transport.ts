// The daemon's HTTP transport: a unix socket, or http(s) over TCP.
import http from "node:http";
import https from "node:https";
import { SandboxError, TimeoutError, fromResponse } from "./errors.js";

export const DEFAULT_SOCKET = "/run/cordon/cordon.sock";

export interface ConnectionOpts {
  /** unix:///path, /path, tcp://host:port or http(s)://host:port (default CORDON_HOST, else the default socket). */
  host?: string;
  /** The API key (default CORDON_API_KEY; none is needed on the unix socket). */
  apiKey?: string;
  /** Bounds each request to the daemon, in milliseconds. */
  requestTimeoutMs?: number;
}

export class Transport {
  readonly host: string;
  readonly base: string;
  private readonly socketPath?: string;
  private readonly apiKey: string;
  private readonly requestTimeoutMs?: number;

  constructor(opts: ConnectionOpts = {}) {
    this.host = opts.host ?? process.env.CORDON_HOST ?? DEFAULT_SOCKET;
    this.apiKey = opts.apiKey ?? process.env.CORDON_API_KEY ?? "";
    this.requestTimeoutMs = opts.requestTimeoutMs;
    const h = this.host;
    if (h.startsWith("unix://") || h.startsWith("/")) {
      this.socketPath = h.startsWith("unix://") ? h.slice("unix://".length) : h;
      this.base = "http://cordon";
    } else if (h.startsWith("tcp://")) {
      this.base = "http://" + h.slice("tcp://".length);
    } else if (h.startsWith("http://") || h.startsWith("https://")) {
      this.base = h.replace(/\/+$/, "");
    } else {
      throw new SandboxError(`cordon host ${JSON.stringify(h)}: want unix:///path, /path, tcp://host:port or http(s)://host:port`);
    }
  }

  /** Sends a request and resolves with the open answer (2xx), or rejects with the daemon's refusal as a typed error. */
  open(method: string, path: string, opts: { query?: Record<string, string | number>; body?: unknown; timeoutMs?: number; signal?: AbortSignal } = {}): Promise<http.IncomingMessage> {
    let p = path;
    if (opts.query) p += "?" + new URLSearchParams(Object.entries(opts.query).map(([k, v]): [string, string] => [k, String(v)])).toString();
    const headers: Record<string, string> = { accept: "application/json" };
    if (this.apiKey) headers.authorization = "Bearer " + this.apiKey;
    let payload: Buffer | undefined;
    let stream: AsyncIterable<unknown> | undefined;
    if (opts.body instanceof Uint8Array) {
      payload = Buffer.from(opts.body);
      headers["content-type"] = "application/octet-stream";
    } else if (isStream(opts.body)) {
      // Sent as it comes, chunked: its length is known only at its end.
      stream = opts.body;
      headers["content-type"] = "application/octet-stream";
    } else if (opts.body !== undefined) {
      payload = Buffer.from(JSON.stringify(opts.body));
      headers["content-type"] = "application/json";
    }
    if (payload) headers["content-length"] = String(payload.length);
    const url = new URL(this.base + p);
    const mod = url.protocol === "https:" ? https : http;
    const timeout = opts.timeoutMs ?? this.requestTimeoutMs;
    return new Promise((resolve, reject) => {
      const req = mod.request(
        { method, headers, socketPath: this.socketPath, hostname: url.hostname, port: url.port, path: url.pathname + url.search, signal: opts.signal },
        (res) => {
          if ((res.statusCode ?? 500) >= 300) {
            const chunks: Buffer[] = [];
            res.on("data", (c: Buffer) => chunks.push(c));
            res.on("end", () => reject(fromResponse(res.statusCode ?? 500, Buffer.concat(chunks).toString())));
            res.on("error", reject);
            return;
          }
          resolve(res);
        },
      );
      if (timeout) {
        req.setTimeout(timeout, () => req.destroy(new TimeoutError(`the daemon did not answer within ${timeout} ms`)));
      }
      req.on("error", (err) => {
        if (err instanceof SandboxError || (err as Error).name === "AbortError") reject(err);
        else reject(new SandboxError(`cannot reach the cordon daemon at ${this.host}: ${err.message}`));
      });
      if (!stream) {
        req.end(payload);
        return;
      }
      const body = stream;
      (async () => {
        try {
          for await (const c of body) {
            if (req.destroyed) return; // the daemon answered, or the connection went: no more to send
            if (!req.write(typeof c === "string" ? Buffer.from(c) : Buffer.from(c as Uint8Array))) {
              await new Promise((r) => {
                req.once("drain", r);
                req.once("close", r);
              });
            }
          }
          req.end();
        } catch (err) {
          // The body failed: the request is cut off before its end, so
          // the daemon writes nothing, and the caller hears the body's
          // own error.
          reject(err);
          req.destroy();
        }
      })();
    });
  }

  /** A request whose answer is JSON (or nothing). */
  async call<T = any>(method: string, path: string, opts: { query?: Record<string, string | number>; body?: unknown; timeoutMs?: number } = {}): Promise<T> {
    const res = await this.open(method, path, opts);
    const buf = await readAll(res);
    return (buf.length ? JSON.parse(buf.toString()) : undefined) as T;
  }
}

/** Whether body is a stream of bytes: a web ReadableStream, a Node stream, an async iterable of chunks. */
export function isStream(body: unknown): body is AsyncIterable<unknown> {
  return typeof body === "object" && body !== null && typeof (body as any)[Symbol.asyncIterator] === "function";
}

export async function readAll(res: http.IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** The NDJSON lines of a streamed answer, parsed. */
export async function* lines(res: http.IncomingMessage): AsyncGenerator<any> {
  let buf = "";
  for await (const chunk of res) {
    buf += (chunk as Buffer).toString();
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (line) yield JSON.parse(line);
    }
  }
  if (buf.trim()) yield JSON.parse(buf);
}
