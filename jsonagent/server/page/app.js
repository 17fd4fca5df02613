// The jsonagent page: plain DOM, no build step. Model and tool text only ever enters the
// page through textContent, never as HTML.
"use strict";
const $ = (id) => document.getElementById(id);
let current = null;   // the run shown
let stream = null;    // its AbortController

function token() { return sessionStorage.getItem("jsonagent-token"); }

async function api(path, options = {}) {
  const headers = Object.assign({"Content-Type": "application/json"}, options.headers || {});
  if (token()) headers.Authorization = "Bearer " + token();
  const response = await fetch(path, Object.assign({}, options, {headers}));
  if (response.status === 401) { askToken(); throw new Error("token needed"); }
  return response;
}

function askToken() {
  const dialog = $("login");
  if (!dialog.open) dialog.showModal();
}

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function show(value) { return typeof value === "string" ? value : JSON.stringify(value, null, 1); }

function stepItem(step) {
  let li = document.querySelector(`#steps li[data-step="${step.index}"]`);
  if (!li) {
    li = el("li"); li.dataset.step = step.index;
    li.append(el("div", "thought"), el("div", "tool"), el("pre", "observation"), el("div", "secs"));
    $("steps").append(li);
  }
  li.querySelector(".thought").textContent = step.thought || "";
  const tool = li.querySelector(".tool");
  if (step.calls) {  // a step of several calls: each on its line, its result below
    tool.replaceChildren(...step.calls.map((c, n) => el("div", null, `${n + 1}. ${c.tool} ${show(c.args || {})}`)));
    li.querySelector(".observation").textContent = step.calls
      .map((c, n) => c.observation === undefined || c.observation === null ? null : `${n + 1}. ${show(c.observation)}`)
      .filter((line) => line !== null).join("\n");
    if (step.calls.some((c) => c.error)) li.classList.add("error");
  } else if (step.tool) tool.replaceChildren(el("code", null, step.tool), document.createTextNode(" " + show(step.args || {})));
  else tool.replaceChildren();
  if (!step.calls && step.observation !== undefined && step.observation !== null) {
    li.querySelector(".observation").textContent = show(step.observation);
  }
  if (step.error) li.classList.add("error");
  if (step.seconds !== undefined) li.querySelector(".secs").textContent = step.seconds.toFixed(2) + " s";
  return li;
}

function render(run) {
  current = run;
  $("current").hidden = false;
  $("run-id").textContent = run.id;
  $("run-status").textContent = run.status;
  $("run-input").textContent = run.input;
  $("steps").replaceChildren();
  run.steps.forEach(stepItem);
  pending(run.status === "requires_action" ? run.required_action : null);
  finish(run);
}

let items = null, decided = {};  // a pending of several items: each is decided in turn

function pending(action) {
  $("respond").hidden = !action;
  if (!action) return;
  items = action.items || null; decided = {};
  ask(items ? items[0] : action);
}

function ask(action) {
  const question = action.kind === "question";
  const which = items ? `(${Object.keys(decided).length + 1} of ${items.length}) ` : "";
  $("pending").textContent = which + (question ? action.question
    : `Allow ${action.tool} with ${show(action.args || {})}?`);
  $("answer-box").hidden = !question;
  $("approve-box").hidden = question;
  (question ? $("answer") : $("reason")).focus();
}

function decide(body) {
  if (!items) return respond(body);
  decided[items[Object.keys(decided).length].id] = body;
  $("answer").value = ""; $("reason").value = "";
  const next = items[Object.keys(decided).length];
  return next ? ask(next) : respond({items: decided});
}

function finish(run) {
  const ended = FINAL.includes(run.status);
  $("cancel").hidden = ended;
  $("final").hidden = !(ended || run.answer !== null);
  $("answer-text").textContent = run.answer !== null && run.answer !== undefined
    ? show(run.answer) : (run.error || run.status);
}

// The thought as the model writes it: typed into the step's item, which the step event then
// fills in for good (its thought is the one the reply was read as, repaired or not).
function onDelta(event) {
  let li = document.querySelector(`#steps li[data-step="${event.step}"]`);
  if (!li) li = stepItem({index: event.step, thought: "", tool: "", args: {}});
  if (li.dataset.attempt !== String(event.attempt)) {  // a re-ask writes the step again
    li.dataset.attempt = String(event.attempt);
    li.querySelector(".thought").textContent = "";
  }
  li.classList.add("writing");
  if (event.type === "thought_delta") li.querySelector(".thought").textContent += event.text;
  if (event.type === "tool_name") li.querySelector(".tool").replaceChildren(el("code", null, event.name));
}

function subEvent(event) {
  // a sub-run's event (an agent used as a tool): nested under the step that called it
  const li = $("steps").lastElementChild;
  if (!li) return;
  let box = li.querySelector(".subruns");
  if (!box) { box = el("div", "subruns"); li.append(box); }
  let line = null;
  if (event.type === "run_start") line = "↳ " + event.question;
  else if (event.type === "step") line = event.tool + " " + show(event.args || {});
  else if (event.type === "tool_result") line = "← " + show(event.observation);
  else if (event.type === "run_end") line = "↳ " + event.status;
  if (line === null) return;
  const row = el("div", event.error ? "sub error" : "sub", line);
  row.style.marginLeft = (event.depth - 1) * 1.2 + "em";
  box.append(row);
}

function onEvent(event) {
  const steps = current.steps;
  if (event.type === "thought_delta" || event.type === "tool_name") {
    // a sub-run's deltas carry its own run id: only the shown run's steps are typed into
    if (event.run_id === current.id) onDelta(event);
  } else if (event.depth) {
    subEvent(event);
  } else if (event.type === "step") {
    const li = document.querySelector(`#steps li[data-step="${event.step}"]`);
    if (li) li.classList.remove("writing");
    stepItem({index: event.step, thought: event.thought, tool: event.tool, args: event.args,
              calls: event.calls || undefined});
  } else if (event.type === "tool_result") {
    const step = steps[event.step - 1] || {};
    if (step.calls) {  // one result of several: the step shows each as it comes
      Object.assign(step.calls[event.call] || {}, {observation: event.observation, error: event.error});
      stepItem({index: event.step, thought: step.thought, calls: step.calls});
    } else {
      stepItem({index: event.step, thought: step.thought, tool: event.tool, args: step.args,
                observation: event.observation, error: event.error, seconds: event.duration_s});
    }
  } else if (event.type === "run_resumed") {
    $("respond").hidden = true;
    $("run-status").textContent = "in_progress";
  } else if (event.type === "run_start") {
    $("run-status").textContent = "in_progress";
  } else if (event.type === "run_end") {
    refresh(current.id);
  }
}

async function follow(runId) {
  if (stream) stream.abort();
  const controller = stream = new AbortController();
  let last = 0;
  while (!controller.signal.aborted) {
    try {
      const headers = {Accept: "text/event-stream"};
      if (last) headers["Last-Event-ID"] = String(last);
      // deltas: the thought as it is written (they carry no id, so `last` counts stored events)
      const response = await api(`/v1/runs/${runId}/events?deltas=true`, {headers, signal: controller.signal});
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) return;
        buffer += value.replace(/\r\n/g, "\n");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
          let data = null;
          for (const line of block.split("\n")) {
            if (line.startsWith("id:")) last = Number(line.slice(3));
            if (line.startsWith("data:")) data = line.slice(5).trim();
          }
          if (data) {
            // keep the step list in step with what the events said
            const event = JSON.parse(data);
            if (event.type === "step" && !event.depth) current.steps[event.step - 1] = {thought: event.thought, args: event.args,
              calls: event.calls ? event.calls.map((c) => ({...c})) : undefined};
            onEvent(event);
          }
        }
      }
    } catch (err) {
      if (controller.signal.aborted) return;
      await new Promise((r) => setTimeout(r, 1000));  // reconnect from the last event
    }
  }
}

async function refresh(runId) {
  const response = await api(`/v1/runs/${runId}`);
  if (response.ok) render(await response.json());
  lists();
}

async function open(runId) {
  await refresh(runId);
  follow(runId);
}

const FINAL = ["completed", "incomplete", "failed", "cancelled", "expired"];
let listing = 0, relist = null;

// The lists follow every run, not only the one shown: while one of them has not ended, look
// again in a moment (a run answered elsewhere ends without an event on this page's stream).
async function lists() {
  const mine = ++listing;
  clearTimeout(relist);
  const [runs, sessions] = await Promise.all([api("/v1/runs?limit=20"), api("/v1/sessions")]);
  const data = (await runs.json()).data, known = (await sessions.json()).data;
  if (mine !== listing) return;  // a later look has answered first
  if (data.some((run) => !FINAL.includes(run.status))) relist = setTimeout(() => lists().catch(() => {}), 2000);
  $("runs").replaceChildren(...data.map((run) => {
    const li = el("li", null, `${run.status} · ${run.input}`);
    li.title = run.id;
    li.onclick = () => open(run.id);
    return li;
  }));
  $("sessions").replaceChildren(...known.map((s) => {
    const li = el("li", null, `${s.name || s.id} · ${s.runs} run${s.runs === 1 ? "" : "s"}`);
    li.onclick = () => { $("session").value = s.name || s.id; if (s.last_run) open(s.last_run); };
    return li;
  }));
}

async function respond(body) {
  const response = await api(`/v1/runs/${current.id}/respond`, {method: "POST", body: JSON.stringify(body)});
  if (!response.ok) { $("status").textContent = (await response.json()).error; return; }
  $("respond").hidden = true;
  $("answer").value = ""; $("reason").value = "";
}

document.addEventListener("DOMContentLoaded", () => {
  $("ask").addEventListener("submit", async (e) => {
    e.preventDefault();
    // the page follows what it starts: the reply streams from the first model call
    const body = {input: $("input").value, stream: true};
    if ($("session").value.trim()) body.session = $("session").value.trim();
    const response = await api("/v1/runs", {method: "POST", body: JSON.stringify(body)});
    const data = await response.json();
    if (!response.ok) { $("status").textContent = data.error; return; }
    $("status").textContent = "";
    $("input").value = "";
    render(data); follow(data.id); lists();
  });
  $("respond").addEventListener("submit", (e) => { e.preventDefault(); decide({answer: $("answer").value}); });
  $("approve").onclick = () => decide({approve: true});
  $("deny").onclick = () => decide({approve: false, reason: $("reason").value || null});
  $("cancel").onclick = () => api(`/v1/runs/${current.id}/cancel`, {method: "POST"});
  $("login-form").addEventListener("submit", () => {
    sessionStorage.setItem("jsonagent-token", $("token").value);
    lists();
  });
  lists().catch(() => {});
});
