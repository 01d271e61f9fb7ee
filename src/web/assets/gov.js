// /gov: every proposal with its live tally against the 66% rule and the quorum.
"use strict";

(() => {
  const { el, byId, clear, getJSON, percent, when, showError } = gym;
  const REFRESH_MS = 5000;

  function tallyCell(t) {
    const yes = el("meter", {
      min: 0, max: 100, low: t.needed_percent - 0.001, optimum: 100,
      value: t.yes_percent, "aria-label": "yes share of the cast weight",
    });
    const quorum = el("meter", {
      min: 0, max: Math.max(t.quorum, 1), value: Math.min(t.cast, Math.max(t.quorum, 1)),
      "aria-label": "cast weight toward the quorum",
    });
    return el("div", { class: "tally" },
      el("p", { class: "tally-line" }, `yes ${t.yes} · no ${t.no} — ${percent(t.yes_percent)} yes of cast (needs ${t.needed_percent}%)`),
      yes,
      el("p", { class: "tally-line" }, `cast ${t.cast} of ${t.total}; quorum ${t.quorum} ${t.quorum_met ? "reached" : "not reached"}`),
      quorum);
  }

  function render(data) {
    const rules = data.rules;
    byId("rules").textContent =
      `A proposal passes with yes ≥ ${data.supermajority_percent}% of the cast weight once the cast weight reaches the quorum ` +
      `(${(rules.quorum_bps / 100).toFixed(2)}% of ${data.total_weight}); voting lasts ${rules.voting_period_secs} s. ` +
      `${data.voters} voters. Ledger ${data.ledger_id}.`;
    const host = clear(byId("proposals"));
    if (!data.proposals.length) {
      host.append(el("p", {}, "No proposals yet. Make one with gym gov propose."));
      return;
    }
    const head = el("tr", {}, ["Proposal", "Library", "Versions", "Deadline", "Tally", "Status"].map((h) => el("th", { scope: "col" }, h)));
    const rows = data.proposals.map((p) =>
      el("tr", { id: `proposal-${p.id}`, "data-status": p.status },
        el("th", { scope: "row", "data-label": "Proposal" },
          el("a", { href: `/gov/proposals/${p.id}` }, `#${p.id} ${p.title}`),
          el("span", { class: "muted block" }, `by ${p.author}`)),
        el("td", { "data-label": "Library" }, el("a", { href: `/libraries/${encodeURIComponent(p.library)}` }, p.library)),
        el("td", { "data-label": "Versions" }, `v${p.base_version} → v${p.new_version}`),
        el("td", { "data-label": "Deadline" }, el("time", { datetime: p.deadline }, when(p.deadline))),
        el("td", { "data-label": "Tally" }, tallyCell(p.tally)),
        el("td", { "data-label": "Status" }, el("span", { class: `badge ${p.status}` }, p.status))));
    host.append(el("table", { class: "proposals" },
      el("caption", { class: "visually-hidden" }, "Proposals, newest first"),
      el("thead", {}, head), el("tbody", {}, rows)));
  }

  let shown = "";

  async function load() {
    try {
      const data = await getJSON("/gov/data/proposals");
      const text = JSON.stringify(data);
      if (text !== shown) {
        shown = text;
        render(data);
      }
      byId("status").textContent = "";
    } catch (error) {
      showError(byId("status"), `Could not read the proposals: ${error.message}`);
    }
  }

  load();
  setInterval(load, REFRESH_MS);
})();
