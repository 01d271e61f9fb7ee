// /gov/proposals/ID: the review, the tally, the votes cast, and voting.
"use strict";

(() => {
  const { el, append, byId, clear, getJSON, postJSON, hash, when, percent, words, provenance, evidence, usage, showError } = gym;
  const REFRESH_MS = 5000;
  const MAX_BALLOT = 4096;
  const match = /^\/gov\/proposals\/(\d{1,18})\/?$/.exec(location.pathname);
  const id = match ? Number(match[1]) : null;
  let page = null;
  let shown = "";

  function fact(term, ...detail) {
    append(byId("facts"), [el("dt", {}, term), el("dd", {}, ...detail)]);
  }

  function renderSummary(data) {
    const r = data.review;
    document.title = `#${r.id} ${r.title} · Gym governance`;
    byId("title").textContent = `Proposal #${r.id}: ${r.title}`;
    clear(byId("facts"));
    fact("Status", el("span", { id: "proposal-status", class: `badge ${data.status}` }, data.status));
    fact("Library", el("a", { href: `/libraries/${encodeURIComponent(r.library)}` }, r.library));
    fact("Versions", `v${r.base_version} → v${r.new_version}`);
    fact("Merkle root before", el("code", { class: "root", id: "root-before" }, r.base_root));
    fact("Merkle root after", el("code", { class: "root", id: "root-after" }, r.new_root));
    fact("Author", r.author);
    if (r.rationale) fact("Rationale", r.rationale);
    fact("Voting until", el("time", { datetime: r.deadline }, when(r.deadline)));
    fact("Ledger", el("code", { class: "root" }, data.ledger_id));
    if (data.execution) {
      const x = data.execution;
      fact("Executed", `${when(x.executed_at)} by `, el("code", {}, x.executor), ` (yes ${x.yes}, no ${x.no}, ${x.votes} votes)`);
    }
    fact("Governed head", `v${data.governed.version} `, hash(data.governed.root));
    byId("summary").hidden = false;
  }

  function renderTally(data) {
    const t = data.tally;
    const host = clear(byId("tally"));
    append(host, [
      el("p", { id: "tally-text" }, `Yes ${t.yes} · No ${t.no} — ${percent(t.yes_percent)} yes of the cast weight (needs ${t.needed_percent}%).`),
      el("label", { for: "yes-meter" }, "Yes share of the cast weight"),
      el("meter", { id: "yes-meter", min: 0, max: 100, low: t.needed_percent - 0.001, optimum: 100, value: t.yes_percent }),
      el("p", { id: "quorum-text" }, `Cast ${t.cast} of ${t.total}; the quorum is ${t.quorum}: ${t.quorum_met ? "reached" : "not reached"}.`),
      el("label", { for: "quorum-meter" }, "Cast weight toward the quorum"),
      el("meter", { id: "quorum-meter", min: 0, max: Math.max(t.quorum, 1), value: Math.min(t.cast, Math.max(t.quorum, 1)) }),
      el("p", {}, t.passes ? "The votes cast pass the proposal." : "The votes cast do not pass the proposal yet."),
    ]);
    byId("tally-section").hidden = false;
  }

  function voterName(vote) {
    return vote.name ? [vote.name, " ", el("code", { class: "address" }, vote.voter || vote.address)] : [el("code", { class: "address" }, vote.voter || vote.address)];
  }

  function renderVotes(data) {
    const host = clear(byId("votes"));
    if (!data.votes.length) {
      host.append(el("p", { id: "no-votes" }, "No votes yet."));
    } else {
      const head = el("tr", {}, ["Voter", "Choice", "Weight", "Received"].map((h) => el("th", { scope: "col" }, h)));
      const rows = data.votes.map((v) => el("tr", { class: `vote ${v.choice}` },
        el("td", { "data-label": "Voter" }, voterName(v)),
        el("td", { "data-label": "Choice" }, el("span", { class: `badge ${v.choice}` }, v.choice)),
        el("td", { "data-label": "Weight" }, v.weight),
        el("td", { "data-label": "Received" }, el("time", { datetime: v.received_at }, when(v.received_at)))));
      host.append(el("table", { id: "votes-table" }, el("caption", { class: "visually-hidden" }, "Votes cast, in the order received"), el("thead", {}, head), el("tbody", {}, rows)));
    }
    const waiting = data.voters.filter((v) => !v.voted);
    if (waiting.length) {
      host.append(el("p", { class: "muted" }, `Not voted yet: ${waiting.map((v) => `${v.name || v.address} (weight ${v.weight})`).join(", ")}.`));
    }
    byId("votes-section").hidden = false;
  }

  function renderVote(data) {
    byId("message-yes").textContent = data.messages.yes;
    byId("message-no").textContent = data.messages.no;
    byId("ballot-command").textContent = `gym gov vote ${data.review.id} yes --key-file FILE --sign-only`;
    const closed = byId("vote-closed");
    closed.hidden = data.open;
    byId("vote-open").hidden = !data.open;
    if (!data.open) closed.textContent = `Voting is over: the proposal is ${data.status}.`;
    byId("vote-section").hidden = false;
  }

  function renderAnchor(data) {
    const a = data.anchor;
    const section = byId("anchor-section");
    if (!a) {
      section.hidden = true;
      return;
    }
    const host = clear(byId("anchor"));
    if (a.chain_id !== undefined) host.append(el("p", {}, `Anchored on chain ${a.chain_id}, registry `, el("code", {}, a.registry), "."));
    if (a.accepted) {
      append(host, [
        el("p", {}, `Accepted on chain: version ${a.accepted.version}, root `, el("code", { class: "root" }, a.accepted.root), "."),
        el("p", { id: "anchor-match", class: a.matches ? "ok" : "error" },
          a.matches ? `The governed head (v${a.governed.version}) matches the root accepted on chain.`
            : `The governed head (v${a.governed.version}, root ${a.governed.root}) does not match the root accepted on chain.`),
      ]);
    } else if (a.error) {
      host.append(el("p", { class: "error" }, `The chain could not be read: ${a.error}`));
    }
    section.hidden = false;
  }

  function content(side) {
    if (!side) return null;
    return el("p", { class: "text" }, el("span", { class: "muted" }, `[${side.domain}] (${Number(side.confidence).toFixed(2)}) `), side.text);
  }

  const CHANGE = { add: ["+", "added"], update: ["~", "updated"], delete: ["−", "deleted"] };

  function renderItems(data) {
    const items = data.review.items;
    const count = (kind) => items.filter((i) => i.change === kind).length;
    byId("items-count").textContent = `${count("add")} added, ${count("update")} updated, ${count("delete")} deleted`;
    const host = clear(byId("items"));
    for (const item of items) {
      const [mark, label] = CHANGE[item.change] || ["?", item.change];
      const body = [];
      if (item.change === "update") {
        body.push(el("p", { class: "label" }, "Before"), content(item.old), el("p", { class: "label" }, "After"), content(item.new));
        if (item.words) body.push(el("p", { class: "label" }, "Word diff"), words(item.words));
      } else if (item.change === "add") {
        body.push(content(item.new));
      } else {
        body.push(content(item.old));
      }
      const steps = item.history.map((step) => {
        const version = data.versions[step.version] || {};
        return el("li", {},
          el("p", {}, `v${step.version} ${step.op} — ${step.source}`, version.created_at ? `, ${when(version.created_at)}` : ""),
          step.reason ? el("p", { class: "reason" }, `Reason: ${step.reason}`) : null,
          evidence(step.evidence),
          el("details", {}, el("summary", {}, `Provenance of v${step.version}`), provenance(version.provenance)));
      });
      const u = item.usage;
      host.append(el("li", { class: `item ${item.change}`, id: `item-${item.id}` },
        el("h3", {}, el("span", { class: "mark", "aria-hidden": "true" }, mark), ` ${item.id} `, el("span", { class: `badge ${item.change}` }, label)),
        body,
        usage(u),
        el("h4", {}, "History in this proposal"),
        el("ol", { class: "steps" }, steps)));
    }
    byId("items-section").hidden = false;
  }

  function render(data, full) {
    page = data;
    if (full) {
      renderSummary(data);
      renderItems(data);
      renderVote(data);
    } else {
      renderSummary(data);
      renderVote(data);
    }
    renderTally(data);
    renderVotes(data);
    renderAnchor(data);
  }

  async function load(full) {
    if (id === null) {
      showError(byId("status"), "This address names no proposal: expected /gov/proposals/NUMBER.");
      return;
    }
    try {
      const data = await getJSON(`/gov/data/proposals/${id}`);
      const text = JSON.stringify(data);
      if (full || text !== shown) render(data, full);
      shown = text;
      byId("status").textContent = "";
    } catch (error) {
      showError(byId("status"), `Could not read proposal ${id}: ${error.message}`);
    }
  }

  // kind: "ok" (recorded), "refused" (with the reason) or "pending".
  function result(kind, message) {
    const host = clear(byId("vote-result"));
    const style = { ok: "ok", refused: "error", pending: "muted" }[kind];
    host.append(el("p", { class: style, id: `vote-${kind}` }, message));
  }

  async function submit(body) {
    const response = await postJSON(`/v1/gov/proposals/${id}/votes`, body);
    if (response.ok) {
      const v = response.body.vote;
      const t = response.body.tally;
      result("ok", `Recorded ${v.ballot.choice} from ${v.ballot.voter} with weight ${v.weight}: yes ${t.yes} / no ${t.no}.`);
    } else {
      result("refused", `Refused by the server (${response.status}): ${response.message}`);
    }
    await load(false);
  }

  function hex(text) {
    return "0x" + Array.from(new TextEncoder().encode(text), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  async function walletVote(choice) {
    const wallet = window.ethereum;
    if (!wallet || typeof wallet.request !== "function") {
      result("refused", "No browser wallet (EIP-1193 window.ethereum) was found. Paste a ballot from gym gov vote --sign-only instead.");
      return;
    }
    const buttons = [byId("vote-yes"), byId("vote-no")];
    buttons.forEach((b) => { b.disabled = true; });
    try {
      result("pending", "Waiting for the wallet to sign…");
      const accounts = await wallet.request({ method: "eth_requestAccounts" });
      if (!Array.isArray(accounts) || !accounts.length) throw new Error("the wallet gave no account");
      const voter = String(accounts[0]);
      const signature = await wallet.request({ method: "personal_sign", params: [hex(page.messages[choice]), voter] });
      await submit(JSON.stringify({ proposal: id, voter, choice, signature: String(signature) }));
    } catch (error) {
      result("refused", `The wallet did not sign: ${error && error.message ? error.message : error}`);
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  }

  async function pasteVote() {
    const text = byId("ballot").value.trim();
    if (!text) {
      result("refused", "Paste the ballot first: the JSON line gym gov vote --sign-only prints.");
      return;
    }
    if (text.length > MAX_BALLOT) {
      result("refused", `A ballot is a short JSON line; this is ${text.length} characters (at most ${MAX_BALLOT}).`);
      return;
    }
    try {
      const ballot = JSON.parse(text);
      if (ballot === null || typeof ballot !== "object" || Array.isArray(ballot)) throw new Error("not a JSON object");
    } catch (error) {
      result("refused", `That is not a ballot (a JSON object with proposal, voter, choice, signature): ${error.message}`);
      return;
    }
    await submit(text);
  }

  byId("vote-yes").addEventListener("click", () => walletVote("yes"));
  byId("vote-no").addEventListener("click", () => walletVote("no"));
  byId("submit-ballot").addEventListener("click", pasteVote);
  load(true);
  setInterval(() => load(false), REFRESH_MS);
})();
