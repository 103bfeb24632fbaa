// An agent script written for E2B's JavaScript SDK, run against cordon with
// only its import changed (`import { Sandbox } from "e2b"` became the line
// below) and the host given by CORDON_HOST instead of E2B_API_KEY.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox } from "../src/index.js"; // was: import { Sandbox } from "e2b";
import { startDaemon } from "./daemon.js";

let stop: () => Promise<void>;
before(async () => {
  stop = await startDaemon();
});
after(async () => {
  await stop();
});

const SCRIPT = `
import json
rows = [{"x": i, "y": i * i} for i in range(5)]
print(json.dumps({"sum": sum(r["y"] for r in rows)}))
`;

async function agentStep(sandbox: Sandbox) {
  // Keep the sandbox for as long as this step may take.
  await sandbox.setTimeout(120_000);
  await sandbox.files.write("analysis.py", SCRIPT);
  const streamed: string[] = [];
  const result = await sandbox.commands.run("python3 analysis.py", { onStdout: (data) => streamed.push(data), timeoutMs: 30_000 });
  const entries = (await sandbox.files.list(".")).map((e) => e.name);
  let failed: [string, number] | undefined;
  try {
    await sandbox.commands.run("python3 -c 'raise SystemExit(2)'");
  } catch (e: any) {
    failed = [e.name, e.exitCode]; // E2B throws CommandExitError here too
  }
  return { stdout: result.stdout, streamed: streamed.join(""), exitCode: result.exitCode, entries, failed };
}

test("an E2B agent script runs unchanged", async () => {
  const sandbox = await Sandbox.create({ timeoutMs: 60_000 });
  try {
    const r = await agentStep(sandbox);
    assert.equal(r.stdout, '{"sum": 30}\n');
    assert.equal(r.streamed, r.stdout);
    assert.equal(r.exitCode, 0);
    assert.ok(r.entries.includes("analysis.py"));
    assert.deepEqual(r.failed, ["CommandExitError", 2]);
  } finally {
    await sandbox.kill();
  }
});

test("an E2B agent pauses its sandbox between turns", async () => {
  // As E2B's v2 SDK has it: pause, a paginated list, connect that resumes.
  const sandbox = await Sandbox.create({ timeoutMs: 60_000 });
  try {
    await sandbox.commands.run("sleep 600", { background: true });
    await sandbox.files.write("memory.txt", "turn 1");
    await sandbox.pause();
    const paginator = Sandbox.list();
    const ids: string[] = [];
    while (paginator.hasNext) for (const s of await paginator.nextItems()) ids.push(s.sandboxId);
    assert.ok(ids.includes(sandbox.sandboxId));
    const same = await Sandbox.connect(sandbox.sandboxId, { timeoutMs: 60_000 });
    assert.equal(await same.files.read("memory.txt"), "turn 1");
    assert.ok((await same.commands.list()).length >= 1);
  } finally {
    await sandbox.kill();
  }
});
