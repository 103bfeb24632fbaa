// cordon's run entry for Deno. It reads the run's envelope (one JSON line)
// from stdin, loads the program as a module, calls its default export with
// the input and writes the result as one marked line on stdout. Console
// output is kept as the run's logs. With bindings, calls to the host go out
// as marked lines on stdout and their answers come back on stdin.
const RESULT = "__CORDON_RUN_RESULT__";
const FRAME = "__CORDON_RUN_MSG__";
const MAX_LOGS = 1000;
const MAX_LOG = 4000;

// No nested workers (their threads would outlive a terminate), and no
// shared memory timers for side channels.
globalThis.Worker = undefined;
for (const name of ["SharedArrayBuffer", "Atomics"]) {
	try { delete globalThis[name]; } catch { globalThis[name] = undefined; }
}

const out = Deno.stdout;
const enc = new TextEncoder();
const writeLine = (s) => {
	const b = enc.encode(s + "\n");
	let off = 0;
	while (off < b.length) off += out.writeSync(b.subarray(off));
};

const logs = [];
for (const level of ["log", "error", "warn", "info", "debug"]) {
	console[level] = (...args) => {
		if (logs.length >= MAX_LOGS) return;
		let line = level + ": " + args.map((a) => {
			if (typeof a === "string") return a;
			try { return JSON.stringify(a); } catch { return String(a); }
		}).join(" ");
		if (line.length > MAX_LOG) line = line.slice(0, MAX_LOG) + "…";
		logs.push(line);
	};
}

// Lines of stdin, read as they come.
const lines = (async function* () {
	const dec = new TextDecoder();
	let buf = "";
	for await (const chunk of Deno.stdin.readable) {
		buf += dec.decode(chunk, { stream: true });
		let i;
		while ((i = buf.indexOf("\n")) >= 0) {
			yield buf.slice(0, i);
			buf = buf.slice(i + 1);
		}
	}
	if (buf) yield buf;
})();

function finish(result) {
	let line;
	try {
		line = JSON.stringify({ ...result, logs });
	} catch (err) {
		line = JSON.stringify({ ok: false, error: "the result is not JSON: " + String(err), logs });
	}
	writeLine(RESULT + line);
	Deno.exit(0);
}

const first = await lines.next();
let env;
try {
	env = JSON.parse(first.value ?? "");
} catch {
	finish({ ok: false, error: "the run's envelope could not be read" });
}

globalThis.__secrets = env.secrets ?? {};
const cordon = { stdin: env.stdin ?? "", secrets: env.secrets ?? {} };
globalThis.cordon = cordon;

if (env.bindings) {
	let next = 1;
	const waiting = new Map();
	(async () => {
		for await (const line of lines) {
			if (!line.startsWith(FRAME)) continue;
			let msg;
			try { msg = JSON.parse(line.slice(FRAME.length)); } catch { continue; }
			const w = waiting.get(msg.id);
			if (!w) continue;
			waiting.delete(msg.id);
			if (msg.ok) w.resolve(msg.value);
			else w.reject(Object.assign(new Error(msg.error?.message ?? "binding call failed"), { code: msg.error?.code }));
		}
	})();
	const call = (method, args) => new Promise((resolve, reject) => {
		const id = next++;
		waiting.set(id, { resolve, reject });
		writeLine(FRAME + JSON.stringify({ type: "rpc", id, method, args: args ?? {} }));
	});
	const b64 = (bytes) => {
		let s = "";
		for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
		return btoa(s);
	};
	cordon.call = call;
	// fetch through the host: it resolves, screens and pins every address
	// and follows redirects itself.
	cordon.fetch = async (input, init = {}) => {
		const req = new Request(input, init);
		const body = req.body ? b64(new Uint8Array(await req.arrayBuffer())) : undefined;
		const r = await call("http.fetch", { url: req.url, method: req.method, headers: Object.fromEntries(req.headers), body });
		const bytes = Uint8Array.from(atob(r.body ?? ""), (c) => c.charCodeAt(0));
		return new Response(r.status === 204 || r.status === 304 ? null : bytes, { status: r.status, headers: r.headers });
	};
	globalThis.fetch = cordon.fetch;
	const collection = (name) => Object.fromEntries(["find", "findOne", "create", "update", "delete"].map((op) => [op, (a) => call(`collections.${name}.${op}`, a ?? {})]));
	const named = (make) => new Proxy({}, { get: (_t, k) => (typeof k === "string" ? make(k) : undefined) });
	globalThis.questpie = {
		files: { read: (a) => call("files.read", a), write: (a) => call("files.write", a), list: (a) => call("files.list", a ?? {}) },
		collections: named(collection),
		tools: { list: () => call("tools.list", {}), call: (name, a) => call("tools.call", { name, arguments: a ?? {} }) },
		http: { fetch: (a) => call("http.fetch", a) },
	};
}

try {
	const url = URL.createObjectURL(new Blob([env.source], { type: env.typescript ? "application/typescript" : "application/javascript" }));
	const mod = await import(url);
	if (typeof mod.default !== "function") {
		finish({ ok: false, error: "the module must export a default function (export default (input) => ...)" });
	}
	const output = await mod.default(env.input ?? null);
	finish(output === undefined ? { ok: true } : { ok: true, output });
} catch (err) {
	finish({ ok: false, error: err instanceof Error ? (err.stack ?? err.message) : String(err) });
}
