// pi-mono's SessionManager driven by benchmarks/log_peers.py: one JSON command a line on
// stdin, one JSON reply a line on stdout. Every operation is timed here, by Node's own
// clock (process.hrtime), so the pipe between the processes is not in the figures.
// fsync calls are counted by wrapping node:fs before the package is imported: the
// durability the run states is read back, not assumed.
//
// log_peers.py copies this file next to the node_modules it installed, so the bare
// import below resolves to that package; it is not meant to be run by hand.
import fs from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import readline from "node:readline";

let fsyncs = 0;
for (const name of ["fsyncSync", "fdatasyncSync", "fsync", "fdatasync"]) {
	const original = fs[name];
	fs[name] = (...args) => {
		fsyncs += 1;
		return original(...args);
	};
}
syncBuiltinESMExports(); // the ESM named exports (`import { fsyncSync } from "fs"`) follow

const { SessionManager } = await import("@mariozechner/pi-coding-agent");
const pkg = JSON.parse(fs.readFileSync(new URL("./node_modules/@mariozechner/pi-coding-agent/package.json", import.meta.url)));

const sessions = new Map(); // name -> SessionManager (the writer of that session's file)

function elapsedMs(started) {
	return Number(process.hrtime.bigint() - started) / 1e6;
}

const handlers = {
	hello() {
		return { version: pkg.version };
	},
	fill({ session, dir, messages }) {
		const manager = SessionManager.create(dir, dir);
		for (const message of messages) manager.appendMessage(message);
		sessions.set(session, manager);
		return { file: manager.getSessionFile(), entries: manager.getEntries().length };
	},
	append({ session, message }) {
		const manager = sessions.get(session);
		const before = fsyncs;
		const started = process.hrtime.bigint();
		manager.appendMessage(message);
		const ms = elapsedMs(started);
		return { ms, fsyncs: fsyncs - before };
	},
	load({ session }) {
		// What resuming a session costs: open its file (read, parse, index) and list it.
		const file = sessions.get(session).getSessionFile();
		const started = process.hrtime.bigint();
		const entries = SessionManager.open(file).getEntries();
		const ms = elapsedMs(started);
		return { ms, entries: entries.length };
	},
};

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
	const command = JSON.parse(line);
	let reply;
	try {
		reply = { ok: true, ...handlers[command.op](command) };
	} catch (error) {
		reply = { ok: false, error: String(error && error.stack ? error.stack : error) };
	}
	process.stdout.write(`${JSON.stringify(reply)}\n`);
}
