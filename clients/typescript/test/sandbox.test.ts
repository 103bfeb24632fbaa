import { after, before, test } from "node:test";
import http from "node:http";
import { Readable } from "node:stream";
import type { AddressInfo } from "node:net";
import assert from "node:assert/strict";
import { Transport } from "../src/transport.js";
import { ALL_TRAFFIC, CommandExitError, InvalidArgumentError, NotEnoughSpaceError, NotFoundError, Sandbox, SandboxError, TimeoutError, type FilesystemEvent } from "../src/index.js";
import { startDaemon } from "./daemon.js";

let stop: () => Promise<void>;
before(async () => {
  stop = await startDaemon();
});
after(async () => {
  await stop();
});

test("commands, files and kill", async () => {
  let id: string;
  {
    await using sbx = await Sandbox.create({ timeoutMs: 120_000, metadata: { suite: "node" } });
    id = sbx.sandboxId;
    assert.match(id, /^sbx_/);
    const r = await sbx.commands.run("echo hello; echo oops >&2; id -u");
    assert.deepEqual([r.stdout, r.stderr, r.exitCode], ["hello\n1000\n", "oops\n", 0]);

    const seen: string[] = [];
    await sbx.commands.run("for i in 1 2 3; do echo $i; done", { onStdout: (d) => seen.push(d) });
    assert.equal(seen.join(""), "1\n2\n3\n");
    await sbx.files.makeDir("sub");
    assert.equal((await sbx.commands.run("echo $A; pwd", { envs: { A: "x" }, cwd: "sub" })).stdout, "x\n/workspace/sub\n");
    assert.equal((await sbx.commands.run("cat", { stdin: "piped in" })).stdout, "piped in");

    await assert.rejects(sbx.commands.run("echo partial; exit 3"), (e: unknown) => e instanceof CommandExitError && e.exitCode === 3 && e.stdout === "partial\n");
    const start = Date.now();
    await assert.rejects(sbx.commands.run("sleep 30", { timeoutMs: 300 }), TimeoutError);
    assert.ok(Date.now() - start < 20_000);
    // No limit asked for is the sandbox's ceiling (without timeoutMs the
    // daemon's default of 5 minutes would hold instead).
    {
      const made = await new Transport({}).call("POST", "/v1/sandboxes", { body: { maxTimeoutMs: 1500, ttlSeconds: 120 } });
      await using ceiling = await Sandbox.connect(made.id);
      assert.equal((await ceiling.commands.run("sleep 0.2; echo done", { timeoutMs: 0 })).stdout, "done\n");
      await assert.rejects(ceiling.commands.run("sleep 30", { timeoutMs: 0 }), (e: unknown) => e instanceof TimeoutError && e.message.includes("(1500 ms)"));
    }

    // A new end, counted from now: later, then sooner.
    const endAt = async () => Date.parse((await sbx.getInfo()).endAt!);
    const first = await endAt();
    await sbx.setTimeout(7_200_000);
    assert.ok((await endAt()) > first + 3_600_000);
    await sbx.setTimeout(60_000);
    assert.ok((await endAt()) < first);
    await assert.rejects(sbx.setTimeout(-1000), InvalidArgumentError);

    await sbx.files.write("dir/a.txt", "text ✓\n");
    assert.equal(await sbx.files.read("dir/a.txt"), "text ✓\n");
    await sbx.files.write("dir/b.bin", new Uint8Array([0, 255, 1]));
    assert.deepEqual(await sbx.files.read("dir/b.bin", { format: "bytes" }), new Uint8Array([0, 255, 1]));
    const chunks: Uint8Array[] = [];
    for await (const c of await sbx.files.read("dir/b.bin", { format: "stream" })) chunks.push(c);
    assert.deepEqual(new Uint8Array(Buffer.concat(chunks)), new Uint8Array([0, 255, 1]));
    assert.deepEqual((await sbx.files.list("dir")).map((e) => [e.name, e.type]).sort(), [["a.txt", "file"], ["b.bin", "file"]]);
    assert.equal(await sbx.files.exists("dir/none"), false);
    const moved = await sbx.files.rename("dir/b.bin", "dir/c.bin");
    assert.ok(moved.name === "c.bin" && moved.path.endsWith("/dir/c.bin") && moved.size === 3, JSON.stringify(moved));
    assert.equal(await sbx.files.exists("dir/b.bin"), false);
    await sbx.files.rename("dir/c.bin", "dir/b.bin");
    await assert.rejects(sbx.files.rename("dir/none", "dir/x"), NotFoundError);
    await sbx.files.remove("dir/a.txt");
    assert.equal(await sbx.files.exists("dir/a.txt"), false);
    await assert.rejects(sbx.files.read("dir/none"), NotFoundError);

    const again = await Sandbox.connect(id);
    assert.equal(await again.files.read("dir/b.bin"), "\u0000\ufffd\u0001");
    assert.ok((await Sandbox.list()).some((s) => s.sandboxId === id && s.metadata.suite === "node"));
    assert.equal(await sbx.isRunning(), true);
  }
  // await using killed it: connect says it is gone, as does kill.
  await assert.rejects(Sandbox.connect(id), NotFoundError);
  assert.equal(await Sandbox.kill(id), false);

  // By id, on the class, as E2B's are.
  const other = await Sandbox.create();
  assert.equal((await Sandbox.getInfo(other.sandboxId)).state, "running");
  await Sandbox.setTimeout(other.sandboxId, 7_200_000);
  assert.ok(Date.parse((await Sandbox.getInfo(other.sandboxId)).endAt!) > Date.now() + 3_600_000);
  assert.equal(await Sandbox.kill(other.sandboxId), true);
  assert.equal(await Sandbox.kill(other.sandboxId), false);
});

test("background commands and ports", async () => {
  await using sbx = await Sandbox.create();
  const h = await sbx.commands.run("echo starting; exec python3 -u -m http.server 8000 --bind 127.0.0.1", { background: true });
  assert.ok(h.pid > 0);
  await sbx.files.write("index.html", "served");
  const url = await sbx.getHost(8000);
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      const res = await fetch(url + "index.html");
      assert.equal(await res.text(), "served");
      break;
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  assert.ok((await sbx.commands.list()).some((c) => c.id === h.id));
  assert.equal(await h.kill(), true);
  await assert.rejects(h.wait(), (e: unknown) => e instanceof CommandExitError && e.stdout.startsWith("starting\n") && e.signal === "SIGKILL");
  const out: string[] = [];
  const done = await (await sbx.commands.run("echo one; sleep 0.2; echo two", { background: true })).wait({ onStdout: (d) => out.push(d) });
  assert.equal(done.exitCode, 0);
  assert.equal(out.join(""), "one\ntwo\n");

  // Callbacks given at the start get a background command's output as it
  // comes; wait() ends with them.
  const called: string[] = [];
  const h2 = await sbx.commands.run("echo a; sleep 0.3; echo b >&2", { background: true, onStdout: (d) => called.push(d), onStderr: (d) => called.push("err:" + d) });
  for (const deadline = Date.now() + 20_000; !called.includes("a\n"); await new Promise((r) => setTimeout(r, 20))) assert.ok(Date.now() < deadline, JSON.stringify(called));
  assert.equal((await h2.wait()).stdout, "a\n");
  assert.deepEqual(called, ["a\n", "err:b\n"]);

  // A background command's own standard input, written piece by piece and
  // then ended, as E2B's sendStdin; or given whole.
  const reader = await sbx.commands.run("while read l; do echo got:$l; done; echo end", { background: true, stdin: true });
  await sbx.commands.sendStdin(reader.pid, "one\ntw");
  await sbx.commands.sendStdin(reader.pid, new TextEncoder().encode("o\n"));
  await sbx.commands.closeStdin(reader.pid);
  assert.equal((await reader.wait()).stdout, "got:one\ngot:two\nend\n");
  // disconnect, as E2B's: the callbacks get nothing more, the command runs
  // on, and wait() reads its output from the start.
  const ticks: string[] = [];
  const ticker = await sbx.commands.run("for i in $(seq 20); do echo $i; sleep 0.1; done", { background: true, onStdout: (d) => ticks.push(d) });
  for (const deadline = Date.now() + 20_000; !ticks.length; await new Promise((r) => setTimeout(r, 20))) assert.ok(Date.now() < deadline);
  await ticker.disconnect();
  const n = ticks.length;
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(ticks.length, n);
  assert.deepEqual((await ticker.wait()).stdout.split("\n").filter(Boolean), Array.from({ length: 20 }, (_, i) => String(i + 1)));
  // By the handle, as E2B's.
  const echo = await sbx.commands.run("while read l; do echo got:$l; done", { background: true, stdin: true });
  await echo.sendStdin("a\n");
  await echo.closeStdin("b\n");
  assert.equal((await echo.wait()).stdout, "got:a\ngot:b\n");
  assert.equal((await (await sbx.commands.run("wc -c", { background: true, stdin: "abc" })).wait()).stdout.trim(), "3");
  await assert.rejects(sbx.commands.sendStdin((await sbx.commands.run("sleep 30", { background: true })).pid, "x"), SandboxError);

  // A character whose bytes come in two chunks of output is one
  // character, on both streams.
  const split =
    'python3 -c "import sys, time\n' +
    "for f in (sys.stdout, sys.stderr):\n" +
    "    b = 'é✓'.encode(); f.buffer.write(b[:1]); f.flush(); time.sleep(0.3); f.buffer.write(b[1:4]); f.flush(); time.sleep(0.3); f.buffer.write(b[4:] + bytes([255]) + b'\\n'); f.flush()\"";
  const seen: string[] = [];
  const whole = await (await sbx.commands.run(split, { background: true })).wait({ onStdout: (d) => seen.push(d) });
  assert.equal(whole.stdout, "é✓\ufffd\n");
  assert.equal(whole.stderr, "é✓\ufffd\n");
  assert.equal(seen.join(""), whole.stdout);
  assert.equal((await sbx.commands.run(split)).stdout, "é✓\ufffd\n");
});

test("watch", async () => {
  await using sbx = await Sandbox.create();
  await sbx.files.makeDir("w");
  const events: FilesystemEvent[] = [];
  const handle = await sbx.files.watchDir("w", (e) => events.push(e));
  await sbx.files.write("w/new.txt", "x");
  const deadline = Date.now() + 10_000;
  while (!events.some((e) => e.name === "new.txt")) {
    assert.ok(Date.now() < deadline, JSON.stringify(events));
    await new Promise((r) => setTimeout(r, 50));
  }
  await handle.stop();
});

test("refusals", async () => {
  await assert.rejects(Sandbox.create({ timeoutMs: -1000 }), InvalidArgumentError);
  await assert.rejects(Sandbox.create({ tier: "no-such-tier" }), SandboxError);
  await assert.rejects(Sandbox.connect("sbx_0000000000000000"), NotFoundError);
  await assert.rejects(Sandbox.create({ host: "ftp://nowhere" }), SandboxError);
  // An option of E2B's that cordon lacks is refused, named, not dropped.
  await assert.rejects(Sandbox.create({ lifecycle: { onTimeout: "pause" } } as any), (e: unknown) => e instanceof InvalidArgumentError && /takes no lifecycle/.test(e.message));
  // A full writable space is its own error, and the file is kept.
  await using sbx = await Sandbox.create({ diskMb: 2 });
  await sbx.files.write("kept", "old");
  await assert.rejects(
    sbx.files.write("kept", new Uint8Array(3 << 20)),
    (e: unknown) => e instanceof NotEnoughSpaceError && e.status === 507 && /writable space is full/.test(e.message),
  );
  assert.equal(await sbx.files.read("kept"), "old");
  await assert.rejects(sbx.commands.run("id -u", { user: "root" } as any), (e: unknown) => e instanceof InvalidArgumentError && /takes no user: commands run as the sandbox's own user/.test(e.message));
  await assert.rejects(sbx.pty.create({ rows: 5, cols: 5, onData: () => {}, user: "root" } as any), InvalidArgumentError);
});

test("an attacker in the sandbox cannot reach out", async () => {
  await using sbx = await Sandbox.create();
  await assert.rejects(
    sbx.commands.run(`python3 -c "import urllib.request; urllib.request.urlopen('http://198.51.100.7/', timeout=5)"`),
    (e: unknown) => e instanceof CommandExitError && /403|refused/i.test(e.stderr),
  );
});

test("allowInternetAccess is any public address, and no more", async () => {
  await using sbx = await Sandbox.create({ allowInternetAccess: true });
  const made = await new Transport({}).call("GET", "/v1/sandboxes/" + sbx.sandboxId);
  assert.equal(made.spec.egress.mode, "allow-all");
  await assert.rejects(
    sbx.commands.run(`python3 -c "import urllib.request; urllib.request.urlopen('http://169.254.169.254/', timeout=5)"`),
    (e: unknown) => e instanceof CommandExitError && /403/.test(e.stderr),
  );
  await assert.rejects(Sandbox.create({ allow: ["a.test"], allowInternetAccess: true }), SandboxError);
});

test("E2B's network options", async () => {
  // All traffic denied but allowOut's, through the real egress proxy (to a
  // server of this test on the host's loopback, which only an address rule
  // reaches); nothing denied is any public address; what an allowlist
  // cannot enforce is refused.
  const srv = http.createServer((_req, res) => res.end("hello from the host"));
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as AddressInfo).port;
  const fetch = (url: string) =>
    `python3 -c "import http.client, os, sys; p = os.environ['HTTP_PROXY'].rsplit(':', 1); c = http.client.HTTPConnection(p[0].split('//')[1], int(p[1]), timeout=10); c.request('GET', sys.argv[1]); r = c.getresponse(); print(r.status, r.read().decode())" ${url}`;
  try {
    {
      await using sbx = await Sandbox.create({ network: { denyOut: [ALL_TRAFFIC], allowOut: [`127.0.0.1:${port}`] } });
      assert.equal((await sbx.commands.run(fetch(`http://127.0.0.1:${port}/`))).stdout, "200 hello from the host\n");
      assert.match((await sbx.commands.run(fetch("http://198.51.100.7/"))).stdout, /^403/);
    }
    {
      await using sbx = await Sandbox.create({ network: { denyOut: [ALL_TRAFFIC] } });
      assert.match((await sbx.commands.run(fetch(`http://127.0.0.1:${port}/`))).stdout, /^403/);
      // Changed live, as E2B's updateNetwork; static too.
      await sbx.updateNetwork({ denyOut: [ALL_TRAFFIC], allowOut: [`127.0.0.1:${port}`] });
      assert.equal((await sbx.commands.run(fetch(`http://127.0.0.1:${port}/`))).stdout, "200 hello from the host\n");
      await Sandbox.updateNetwork(sbx.sandboxId, { denyOut: [ALL_TRAFFIC] });
      assert.match((await sbx.commands.run(fetch(`http://127.0.0.1:${port}/`))).stdout, /^403/);
      await assert.rejects(sbx.updateNetwork({ denyOut: ["10.0.0.0/8"] }), InvalidArgumentError);
    }
  } finally {
    srv.close();
  }
  for (const bad of [{ denyOut: ["10.0.0.0/8"] }, { allowOut: ["a.test"] }, { denyOut: [ALL_TRAFFIC], rules: {} }]) {
    await assert.rejects(Sandbox.create({ network: bad as any }), InvalidArgumentError);
  }
  await assert.rejects(Sandbox.create({ network: { denyOut: [ALL_TRAFFIC] }, allow: ["a.test"] }), InvalidArgumentError);
});

test("file URLs", async () => {
  // E2B's downloadUrl and uploadUrl: a URL of the daemon that reads or
  // writes one file with no key (as a browser would use it).
  await using sbx = await Sandbox.create();
  await sbx.files.write("out/chart.svg", "<svg/>");
  const url = await sbx.downloadUrl("out/chart.svg", { useSignatureExpiration: 60 });
  const got = await fetch(url);
  assert.equal(got.status, 200);
  assert.equal(await got.text(), "<svg/>");
  const up = await sbx.uploadUrl("in/data.bin");
  assert.equal((await fetch(up, { method: "PUT", body: new Uint8Array([0, 1]) })).status, 200);
  assert.deepEqual(await sbx.files.read("in/data.bin", { format: "bytes" }), new Uint8Array([0, 1]));
  // As E2B's docs post to an upload URL: a form whose field "file" holds
  // the content.
  const form = new FormData();
  form.append("file", "file content");
  const posted = await fetch(up, { method: "POST", body: form });
  assert.equal(posted.status, 200);
  assert.equal(((await posted.json()) as { name: string }[])[0].name, "data.bin");
  assert.equal(await sbx.files.read("in/data.bin"), "file content");
  assert.equal((await fetch(url, { method: "PUT", body: "x" })).status, 404);
  await assert.rejects(sbx.uploadUrl(""), InvalidArgumentError);
  await assert.rejects(sbx.downloadUrl("out/chart.svg", { useSignatureExpiration: 86401 }), InvalidArgumentError);
  await assert.rejects(sbx.downloadUrl("out/chart.svg", { user: "root" } as any), InvalidArgumentError);
});

test("files.write takes what E2B's does: a Blob and streams, sent as they come", async () => {
  await using sbx = await Sandbox.create();
  const w = await sbx.files.write("blob.txt", new Blob(["from ", "a blob"]));
  assert.ok(w.path.startsWith("/") && w.path.endsWith("/blob.txt") && w.name === "blob.txt", JSON.stringify(w));
  assert.equal(await sbx.files.read("blob.txt"), "from a blob");
  // A web ReadableStream, a Node stream and an async generator, of a
  // length known only at their ends.
  const big = new Uint8Array(3 << 20).map((_, i) => i % 251);
  const web = new ReadableStream<Uint8Array>({
    start(c) {
      for (let i = 0; i < big.length; i += 1 << 20) c.enqueue(big.subarray(i, i + (1 << 20)));
      c.close();
    },
  });
  await sbx.files.write("web.bin", web);
  assert.deepEqual(await sbx.files.read("web.bin", { format: "bytes" }), big);
  await sbx.files.write("node.txt", Readable.from(["node ", "stream"]));
  assert.equal(await sbx.files.read("node.txt"), "node stream");
  await sbx.files.write("gen.txt", (async function* () {
    yield new TextEncoder().encode("gen");
    yield "erated";
  })());
  assert.equal(await sbx.files.read("gen.txt"), "generated");
  // A stream that fails midway: the caller hears its error, and the file
  // is left as it was.
  await assert.rejects(
    sbx.files.write("gen.txt", (async function* () {
      yield "half";
      throw new Error("the source broke");
    })()),
    /the source broke/,
  );
  assert.equal(await sbx.files.read("gen.txt"), "generated");
  // What is none of these is refused, not written as "[object Object]".
  await assert.rejects(sbx.files.write("x.txt", { some: "object" } as any), InvalidArgumentError);
  await assert.rejects(sbx.files.write("x.txt", 5 as any), InvalidArgumentError);
});

test("snapshot and fork", async () => {
  await using sbx = await Sandbox.create();
  await sbx.files.write("state.txt", "v1");
  const snap = await sbx.snapshot();
  assert.match(snap.snapshotId, /^snap_/);
  assert.equal(snap.source, sbx.sandboxId);
  await sbx.files.write("state.txt", "v2");
  {
    await using restored = await Sandbox.create({ snapshot: snap.snapshotId });
    assert.equal(await restored.files.read("state.txt"), "v1");
  }
  const forks = await sbx.fork(2);
  try {
    assert.equal(new Set([sbx.sandboxId, ...forks.map((f) => f.sandboxId)]).size, 3);
    await forks[0].files.write("state.txt", "mine");
    assert.equal(await forks[1].files.read("state.txt"), "v2");
    assert.equal(await sbx.files.read("state.txt"), "v2");
  } finally {
    for (const f of forks) await f.kill();
  }
  assert.ok((await Sandbox.listSnapshots()).some((s) => s.snapshotId === snap.snapshotId));
  // By E2B's names: createSnapshot (a name refused: cordon's have none),
  // and listSnapshots as a paginator.
  const again = await sbx.createSnapshot();
  await assert.rejects(sbx.createSnapshot({ name: "nightly" }), InvalidArgumentError);
  const p = Sandbox.listSnapshots({ limit: 1 });
  const listed: string[] = [];
  while (p.hasNext) for (const s of await p.nextItems()) listed.push(s.snapshotId);
  assert.ok(listed.includes(snap.snapshotId) && listed.includes(again.snapshotId));
  assert.equal(await Sandbox.deleteSnapshot(again.snapshotId), true);
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true);
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false);
  await assert.rejects(Sandbox.create({ snapshot: snap.snapshotId }), NotFoundError);
});

test("a persistent sandbox stopped and started keeps its files", async () => {
  await using sbx = await Sandbox.create({ persistent: true, diskMb: 64 });
  await sbx.files.write("kept.txt", "v1");
  const boot = (await sbx.getInfo()).bootId;
  assert.ok(boot);
  await sbx.stop();
  assert.equal((await sbx.getInfo()).state, "suspended");
  await sbx.start();
  const info = await sbx.getInfo();
  assert.equal(info.state, "running");
  assert.ok(info.bootId && info.bootId !== boot);
  assert.equal(await sbx.files.read("kept.txt"), "v1");
  const r = await sbx.commands.run("dd if=/dev/zero of=big bs=1M count=100 2>&1 || true");
  assert.match(r.stdout, /No space left/);
  // E2B's pause without its memory is this stop; connect starts it.
  const before = (await sbx.getInfo()).bootId;
  assert.equal(await sbx.pause({ keepMemory: false }), true);
  assert.equal((await sbx.getInfo()).state, "suspended");
  assert.equal(await Sandbox.pause(sbx.sandboxId, { keepMemory: false }), false);
  await Sandbox.connect(sbx.sandboxId);
  const after = await sbx.getInfo();
  assert.ok(after.state === "running" && after.bootId !== before);
  assert.equal(await sbx.files.read("kept.txt"), "v1");
});

test("pause and connect", async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000 });
  const h = await sbx.commands.run("sleep 600", { background: true });
  const firstEnd = (await sbx.getInfo()).endAt!;
  assert.equal(await sbx.pause(), true);
  // Paused: not running, listed as paused, its work refused; a second
  // pause says it was paused already.
  assert.equal(await sbx.isRunning(), false);
  assert.ok((await Sandbox.list({ query: { state: ["paused"] } })).some((s) => s.sandboxId === sbx.sandboxId));
  await assert.rejects(sbx.commands.run("true"), SandboxError);
  assert.equal(await Sandbox.pause(sbx.sandboxId), false);
  assert.equal(await sbx.betaPause(), false);
  // connect thaws it, with its processes as they were, and moves its end
  // later (never sooner).
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 600_000 });
  assert.equal(await again.isRunning(), true);
  assert.deepEqual((await again.commands.list()).filter((c) => c.pid === h.pid).map((c) => c.state), ["running"]);
  const later = (await again.getInfo()).endAt!;
  assert.ok(Date.parse(later) > Date.parse(firstEnd));
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 1000 });
  assert.equal((await again.getInfo()).endAt, later);
  // keepMemory: false is a stop, which only a persistent sandbox has:
  // refused here, not taken for a pause.
  await assert.rejects(sbx.pause({ keepMemory: false }), SandboxError);
  assert.equal(await sbx.isRunning(), true);
  await sbx.kill();
  await assert.rejects(Sandbox.connect(sbx.sandboxId), NotFoundError);
});

test("pty", async () => {
  await using sbx = await Sandbox.create();
  const seen: Uint8Array[] = [];
  const term = await sbx.pty.create({ rows: 24, cols: 80, onData: (d) => seen.push(d) });
  assert.ok(term.pid > 0);
  const out = () => Buffer.concat(seen).toString();
  const until = async (text: string) => {
    const deadline = Date.now() + 20_000;
    while (!out().includes(text)) {
      assert.ok(Date.now() < deadline, out());
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  // What the terminal wrote, as it wrote it, to onData; typed input, a
  // size change the program sees, and the shell's exit status.
  await sbx.pty.sendInput(term.pid, "stty size; echo $((6 * 7)); tty\n");
  await until("/dev/pts/");
  await sbx.pty.resize(term.pid, { rows: 30, cols: 100 });
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode("stty size; exit 3\n"));
  await assert.rejects(term.wait(), (e: unknown) => e instanceof CommandExitError && e.exitCode === 3);
  assert.ok(seen.every((d) => d instanceof Uint8Array));
  assert.ok(out().includes("24 80") && out().includes("42") && out().includes("30 100"), out());
  // A terminal's program is killed by its pid; after, there is none.
  const other = await sbx.pty.create({ rows: 10, cols: 10, cmd: "sleep 600", onData: () => {} });
  assert.equal(await sbx.pty.kill(other.pid), true);
  await assert.rejects(other.wait(), CommandExitError);
  await assert.rejects(sbx.pty.sendInput(123456789, "x"), NotFoundError);
});

test("background timeouts", async () => {
  await using sbx = await Sandbox.create();
  // No timeout given: a background command runs on (E2B's stops it after
  // the foreground's default of 60 seconds), with no timeout at all.
  const free = await sbx.commands.run("sleep 600", { background: true });
  const listed = (await sbx.commands.list()).find((c) => c.pid === free.pid);
  assert.ok(listed && listed.timeoutMs === undefined && listed.tag === free.id && listed.cmd === "/bin/sh" && listed.args.at(-1) === "sleep 600", JSON.stringify(listed));
  // Given one, it is ended then, what it left running included, and
  // wait() throws TimeoutError.
  const h = await sbx.commands.run("sleep 300 & wait", { background: true, timeoutMs: 1000 });
  await assert.rejects(h.wait(), TimeoutError);
  assert.equal((await sbx.commands.run("pgrep -x sleep | wc -l")).stdout.trim(), "1");
  // A terminal, likewise.
  const term = await sbx.pty.create({ rows: 10, cols: 40, cmd: "sleep 600", timeoutMs: 500, onData: () => {} });
  await assert.rejects(term.wait(), TimeoutError);
  assert.equal(await free.kill(), true);
});

test("getMetrics", async () => {
  let id: string;
  {
    await using sbx = await Sandbox.create({ timeoutMs: 120_000, memoryMb: 256 });
    id = sbx.sandboxId;
    await sbx.commands.run("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; head -c 8388608 /dev/zero > m.bin");
    await sbx.commands.run(`python3 -c "import time; b = b'x' * (32 << 20); time.sleep(600)"`, { background: true });
    let m = (await sbx.getMetrics()).at(-1)!;
    for (let i = 0; i < 100 && !(m.tasks >= 1 && (m.memUsed ?? 0) >= 40 << 20); i++) {
      await new Promise((r) => setTimeout(r, 100));
      m = (await sbx.getMetrics()).at(-1)!;
    }
    assert.ok(m.timestamp instanceof Date && !isNaN(m.timestamp.getTime()), String(m.timestamp));
    assert.ok(m.cpuCount > 0 && m.cpuUsedPct >= 0 && m.cpuUsedPct <= 100 && m.cpuSeconds >= 0.05, JSON.stringify(m));
    assert.ok(m.memUsed !== undefined && m.memUsed >= 40 << 20 && m.memUsed <= m.memTotal && m.memTotal === 256 << 20, JSON.stringify(m));
    assert.ok(m.diskUsed >= 8 << 20 && m.diskUsed <= m.diskTotal && m.tasks >= 1 && m.oomKills === 0, JSON.stringify(m));
    const again = (await Sandbox.getMetrics(id)).at(-1)!;
    assert.ok(again.cpuSeconds >= m.cpuSeconds);
    // Over time: the daemon's readings (every 200 ms here), oldest first,
    // then one taken now; a window that ends before now has no reading of
    // now, and one that starts at now only that.
    let all = await sbx.getMetrics();
    for (let i = 0; i < 100 && all.length < 3; i++) {
      await new Promise((r) => setTimeout(r, 100));
      all = await sbx.getMetrics();
    }
    assert.ok(all.length >= 3, String(all.length));
    assert.ok(all.every((x, i) => i === 0 || x.timestamp > all[i - 1].timestamp));
    const cut = all[1].timestamp;
    const old = await sbx.getMetrics({ end: cut });
    assert.ok(old[0].timestamp.getTime() === all[0].timestamp.getTime() && old.every((x) => x.timestamp.getTime() <= cut.getTime() + 1000), JSON.stringify(old.map((x) => x.timestamp)));
    const fresh = await Sandbox.getMetrics(id, { start: new Date(Date.now() + 1000) });
    assert.equal(fresh.length, 1);
  }
  await assert.rejects(Sandbox.getMetrics(id), NotFoundError);
});

test("list with a query", async () => {
  await using a = await Sandbox.create({ timeoutMs: 120_000, metadata: { team: "a", job: "1" } });
  await using b = await Sandbox.create({ timeoutMs: 120_000, metadata: { team: "b" } });
  const ids = async (query: any) => new Set((await Sandbox.list({ query })).map((s) => s.sandboxId).filter((id) => id === a.sandboxId || id === b.sandboxId));
  assert.deepEqual(await ids({ metadata: { team: "a" } }), new Set([a.sandboxId]));
  assert.deepEqual(await ids({ metadata: { team: "a", job: "2" } }), new Set());
  assert.deepEqual(await ids({ state: ["running"] }), new Set([a.sandboxId, b.sandboxId]));
  assert.deepEqual(await ids({ state: ["paused"] }), new Set());
  // E2B's v2 paginator over the same, a page at a time.
  const pages: string[][] = [];
  const p = Sandbox.list({ query: { metadata: { team: "a" } }, limit: 1 });
  while (p.hasNext) pages.push((await p.nextItems()).map((s) => s.sandboxId));
  assert.deepEqual(pages, [[a.sandboxId]]);
  await assert.rejects(p.nextItems(), SandboxError);
  const all = Sandbox.list({ limit: 1 });
  const seen = new Set<string>();
  while (all.hasNext) for (const s of await all.nextItems()) seen.add(s.sandboxId);
  assert.ok(seen.has(a.sandboxId) && seen.has(b.sandboxId));
  assert.throws(() => Sandbox.list({ limit: 0 }), InvalidArgumentError);
});
