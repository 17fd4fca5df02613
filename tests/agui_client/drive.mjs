// Drives a real `jsonagent serve` with the official AG-UI client (@ag-ui/client's HttpAgent),
// whose own pipeline verifies every stream (verifyEvents): an event out of order fails the run.
//
//   node drive.mjs '{"url": "http://127.0.0.1:PORT/ag-ui", "token": "...", "scenario": "...",
//                    "thread": "...", "input": "..."}'
//
// Prints one JSON line: each AG-UI run's events as the client received them (after
// verification), the outcome, the messages the agent holds, and any error.
import { HttpAgent } from "@ag-ui/client";

const args = JSON.parse(process.argv[2]);
const agent = new HttpAgent({
  url: args.url,
  threadId: args.thread,
  headers: args.token ? { Authorization: `Bearer ${args.token}` } : {},
});

const runs = [];

// one AG-UI run: its events, what it ended with, and the client's error if it rejected any
async function run(params = {}, onEvent = () => {}) {
  const record = { events: [], outcome: null, error: null, interrupts: [], pending: [] };
  runs.push(record);
  try {
    await agent.runAgent(params, {
      onEvent({ event }) {
        record.events.push(event);
        onEvent(event, record);
      },
      onRunFinishedEvent(p) {
        record.outcome = p.outcome;
        record.interrupts = p.interrupts || [];
        record.pending = p.pendingToolCallIds || [];
        record.result = p.result;
      },
      onRunErrorEvent({ event }) {
        record.outcome = "error";
        record.message = event.message;
      },
    });
  } catch (err) {
    record.error = String(err && err.message ? err.message : err);
  }
  return record;
}

function say(text) {
  agent.addMessage({ id: `u-${runs.length}-${Date.now()}`, role: "user", content: text });
}

const scenarios = {
  // a run that calls its tools and completes
  async complete() {
    say(args.input);
    await run();
  },
  // a question interrupts; the resume answers it by the interrupt's id
  async question() {
    say(args.input);
    const first = await run();
    const open = first.interrupts[0];
    if (!open) return;
    await run({ resume: [{ interruptId: open.id, status: "resolved", payload: { answer: args.answer } }] });
    // the answered interrupt again: never offered again, an error that says so
    await run({ resume: [{ interruptId: open.id, status: "resolved", payload: { answer: "again" } }] });
  },
  // an approval denied through resume: the tool does not run
  async deny() {
    say(args.input);
    const first = await run();
    const open = first.interrupts[0];
    if (!open) return;
    // an unknown id first: an error, and the run is left as it was (the client itself
    // refuses a resume that leaves its open interrupt unanswered, so it forgets it meanwhile)
    const held = agent.pendingInterrupts;
    agent.pendingInterrupts = [];
    await run({ resume: [{ interruptId: "no-such-interrupt", status: "resolved", payload: { approved: true } }] });
    agent.pendingInterrupts = held;
    await run({ resume: [{ interruptId: open.id, status: "resolved", payload: { approved: false, reason: args.reason } }] });
  },
  // a frontend tool: the run ends with the call pending; its result goes in the next input
  async frontend() {
    say(args.input);
    const tools = [args.tool];
    const first = await run({ tools });
    for (const id of first.pending) {
      agent.addMessage({ id: `t-${id}`, role: "tool", toolCallId: id, content: args.result });
    }
    if (first.pending.length) await run({ tools });
  },
  // the client aborts mid-run: the run is cancelled
  async abort() {
    say(args.input);
    await run({}, (event) => {
      if (event.type === args.abortAfter) setTimeout(() => agent.abortRun(), 50);
    });
  },
  // reads one run and reports when each event came (the streaming test)
  async timed() {
    say(args.input);
    const t0 = Date.now();
    await run({}, (event, record) => { event._ms = Date.now() - t0; });
  },
};

const timeout = setTimeout(() => {
  console.log(JSON.stringify({ runs, error: "driver timed out", messages: agent.messages }));
  process.exit(3);
}, (args.timeout || 60) * 1000);

try {
  await scenarios[args.scenario]();
} catch (err) {
  runs.push({ error: String(err && err.stack ? err.stack : err) });
}
clearTimeout(timeout);
console.log(JSON.stringify({ runs, messages: agent.messages }));
process.exit(0);
