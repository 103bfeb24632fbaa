// Starts a real daemon for the tests (cordon serve --ephemeral over TCP
// with an admin key, its state in a directory of its own), unless
// CORDON_HOST names one already.
import { spawn, ChildProcess } from "node:child_process";
import { mkdtempSync, chmodSync, writeFileSync, rmSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

export async function startDaemon(): Promise<() => Promise<void>> {
  if (process.env.CORDON_HOST) return async () => {};
  const cordon = process.env.CORDON_BIN ?? path.join(repo, "bin", "cordon");
  const dir = mkdtempSync(path.join(tmpdir(), "cordon-node-"));
  chmodSync(dir, 0o711); // sandboxes run as unprivileged users that must pass through it
  const port = await freePort();
  const key = randomBytes(24).toString("hex");
  writeFileSync(path.join(dir, "admin.key"), key);
  const p: ChildProcess = spawn(cordon, ["serve", "--ephemeral", "--listen", `tcp://127.0.0.1:${port}`, "--admin-key-file", path.join(dir, "admin.key"), "--state-dir", path.join(dir, "state"), "--metrics-interval", "200ms"], {
    env: { ...process.env, CORDON_STATE_DIR: path.join(dir, "sandboxes") },
    stdio: ["ignore", "ignore", "inherit"],
  });
  const deadline = Date.now() + 30_000;
  for (;;) {
    const up = await new Promise<boolean>((resolve) => {
      const c = net.connect(port, "127.0.0.1", () => { c.end(); resolve(true); });
      c.on("error", () => resolve(false));
    });
    if (up) break;
    if (p.exitCode !== null || Date.now() > deadline) throw new Error("cordon serve did not start");
    await new Promise((r) => setTimeout(r, 20));
  }
  process.env.CORDON_HOST = `http://127.0.0.1:${port}`;
  process.env.CORDON_API_KEY = key;
  return async () => {
    delete process.env.CORDON_HOST;
    delete process.env.CORDON_API_KEY;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGTERM");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
}
