// /libraries and /libraries/NAME: versions with ops and provenance, diffs, histories, proofs.
"use strict";

(() => {
  const { el, append, byId, clear, getJSON, hash, when, words, provenance, evidence, usage, showError } = gym;
  const match = /^\/libraries\/([^/]+)\/?$/.exec(location.pathname);
  const name = match ? decodeURIComponent(match[1]) : null;
  const base = name === null ? null : `/libraries/data/${encodeURIComponent(name)}`;
  const MARK = { add: "+", update: "~", delete: "−" };

  async function showList() {
    const data = await getJSON("/v1/libraries");
    const host = clear(byId("list"));
    if (!data.data.length) {
      host.append(el("p", {}, "No libraries yet. Make one with gym library init."));
      return;
    }
    const head = el("tr", {}, ["Library", "Head version", "Experiences", "Merkle root"].map((h) => el("th", { scope: "col" }, h)));
    const rows = data.data.map((l) => el("tr", {},
      el("th", { scope: "row", "data-label": "Library" }, el("a", { href: `/libraries/${encodeURIComponent(l.name)}` }, l.name)),
      el("td", { "data-label": "Head version" }, `v${l.head.version}`),
      el("td", { "data-label": "Experiences" }, l.head.count),
      el("td", { "data-label": "Merkle root" }, hash(l.head.root))));
    host.append(el("table", {}, el("caption", { class: "visually-hidden" }, "Libraries"), el("thead", {}, head), el("tbody", {}, rows)));
  }

  function opLine(op) {
    const text = op.op === "delete" ? (op.reason ? `deleted: ${op.reason}` : "deleted") : op.text;
    return el("li", { class: `op ${op.op}` },
      el("span", { class: "mark", "aria-hidden": "true" }, MARK[op.op] || "?"), " ",
      el("span", { class: "visually-hidden" }, `${op.op} `),
      el("a", { href: `?experience=${op.id}`, "data-experience": op.id }, op.id), " ",
      text, evidence(op.evidence));
  }

  function showVersions(data) {
    const host = clear(byId("versions"));
    for (const v of data.versions) {
      host.append(el("li", { id: `version-${v.version}`, value: v.version },
        el("h3", {}, `v${v.version}`, el("span", { class: "muted" }, ` — ${when(v.created_at)} — ${v.summary}`)),
        el("p", {}, `${v.count} active; root `, hash(v.root), v.parent_root ? [" ; parent root ", hash(v.parent_root)] : null),
        v.ops.length ? el("ul", { class: "ops" }, v.ops.map(opLine)) : el("p", { class: "muted" }, "No ops (the empty library)."),
        el("details", {}, el("summary", {}, `Provenance of v${v.version}`), provenance(v.provenance))));
    }
    byId("versions-section").hidden = false;
  }

  function side(content) {
    if (!content) return null;
    return el("p", { class: "text" }, el("span", { class: "muted" }, `[${content.domain}] (${Number(content.confidence).toFixed(2)}) `), content.text);
  }

  async function showDiff(from, to) {
    const host = clear(byId("diff"));
    host.append(el("p", { class: "muted" }, "Loading the diff…"));
    let data;
    try {
      data = await getJSON(`${base}/diff?from=${from}&to=${to}`);
    } catch (error) {
      showError(host, `Could not diff v${from} and v${to}: ${error.message}`);
      return;
    }
    clear(host);
    const count = (kind) => data.items.filter((i) => i.change === kind).length;
    append(host, [
      el("p", { id: "diff-summary" }, `v${data.from} → v${data.to}: ${count("add")} added, ${count("update")} updated, ${count("delete")} deleted.`),
      el("p", {}, "Root ", hash(data.from_root), " → ", hash(data.to_root)),
    ]);
    const list = el("ol", { class: "items", id: "diff-items" });
    for (const item of data.items) {
      const body = [];
      if (item.change === "update") {
        body.push(el("p", { class: "label" }, "Before"), side(item.old), el("p", { class: "label" }, "After"), side(item.new));
        if (item.words) body.push(el("p", { class: "label" }, "Word diff"), words(item.words));
      } else if (item.change === "add") {
        body.push(side(item.new));
      } else {
        body.push(side(item.old));
        if (item.reason) body.push(el("p", { class: "reason" }, `Reason: ${item.reason}`));
      }
      list.append(el("li", { class: `item ${item.change}` },
        el("h3", {}, el("span", { class: "mark", "aria-hidden": "true" }, MARK[item.change]), ` ${item.id} `, el("span", { class: `badge ${item.change}` }, item.change)),
        body));
    }
    if (!data.items.length) host.append(el("p", {}, "The two versions hold the same experiences."));
    else host.append(list);
  }

  function download(filename, text) {
    const url = URL.createObjectURL(new Blob([text], { type: "application/json" }));
    const link = el("a", { href: url, download: filename, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  async function showExperience(id) {
    const host = clear(byId("experience"));
    let data;
    try {
      data = await getJSON(`${base}/experiences/${encodeURIComponent(id)}`);
    } catch (error) {
      showError(host, `Could not read ${id}: ${error.message}`);
      return;
    }
    const e = data.experience;
    const u = data.usage;
    append(host, [
      el("h3", {}, `${e.id} (${e.status})`),
      el("p", { class: "text" }, el("span", { class: "muted" }, `[${e.domain}] (${Number(e.confidence).toFixed(2)}) `), e.text),
      usage(u),
    ]);
    const steps = el("ol", { class: "steps", id: "experience-history" });
    for (const step of data.history) {
      const op = step.op;
      steps.append(el("li", {},
        el("p", {}, `v${step.version} ${op.op} — ${step.summary}, ${when(step.created_at)}`),
        op.op === "delete" ? el("p", { class: "reason" }, op.reason ? `Reason: ${op.reason}` : "No reason given.") : null,
        step.words ? words(step.words) : (op.text ? el("p", { class: "text" }, op.text) : null),
        evidence(op.evidence),
        el("details", {}, el("summary", {}, `Provenance of v${step.version}`), provenance(step.provenance))));
    }
    host.append(el("h4", {}, "History"), steps);
    const proof = el("div", { class: "proof" });
    if (data.last_active_version === null) {
      proof.append(el("p", { class: "muted" }, "It was never in a version, so there is no proof."));
    } else {
      const input = el("input", { id: "proof-version", type: "number", min: 0, max: data.head, value: data.last_active_version, inputmode: "numeric" });
      const button = el("button", { type: "button", id: "proof-download" }, "Download the inclusion proof");
      const status = el("div", { id: "proof-status", role: "status", "aria-live": "polite" });
      const preview = el("pre", { id: "proof-json", class: "message", hidden: true });
      button.addEventListener("click", async () => {
        const version = Number(input.value);
        if (!Number.isInteger(version) || version < 0) {
          showError(status, "The version is a whole number.");
          return;
        }
        const response = await fetch(`/v1/libraries/${encodeURIComponent(name)}/proof/${encodeURIComponent(id)}?version=${version}`);
        const text = await response.text();
        if (!response.ok) {
          let message = `${response.status}`;
          try { message = JSON.parse(text).error.message; } catch (_) { /* keep the status */ }
          showError(status, `No proof: ${message}`);
          preview.hidden = true;
          return;
        }
        const filename = `${name}-${id}-v${version}.proof.json`;
        download(filename, text);
        clear(status).append(el("p", { class: "ok" }, `Downloaded ${filename}; check it with gym library verify-proof ${filename}.`));
        preview.textContent = text;
        preview.hidden = false;
      });
      append(proof, [
        el("h4", {}, "Inclusion proof"),
        el("p", { class: "muted" }, "A Merkle proof that this experience, with exactly this content, is in a version; gym library verify-proof checks it without the library."),
        el("div", { class: "inline-form" }, el("label", { for: "proof-version" }, "Version"), input, button),
        status, preview,
      ]);
    }
    host.append(proof);
  }

  function option(value, label, selected) {
    return el("option", { value, selected }, label);
  }

  async function showLibrary() {
    document.title = `${name} · Libraries · Gym`;
    byId("title").textContent = `Library ${name}`;
    const data = await getJSON(base);
    const params = new URLSearchParams(location.search);
    const head = data.head;
    const governed = data.governed ? data.governed.version : null;
    const from = params.has("from") ? Number(params.get("from")) : (governed !== null && governed < head ? governed : Math.max(head - 1, 0));
    const to = params.has("to") ? Number(params.get("to")) : head;
    const versions = data.versions.map((v) => v.version);
    clear(byId("list")).append(el("p", {}, `Head v${head}${governed !== null ? `; governed v${governed}` : ""}; at most ${data.max_words} words per experience.`));
    for (const [select, chosen] of [[byId("diff-from"), from], [byId("diff-to"), to]]) {
      clear(select).append(...versions.map((v) => option(v, `v${v}`, v === chosen)));
    }
    const experience = params.get("experience");
    clear(byId("experience-id")).append(...data.experiences.map((e) =>
      option(e.id, `${e.id} (${e.status}) ${e.text.length > 48 ? e.text.slice(0, 48) + "…" : e.text}`, e.id === experience)));
    byId("diff-section").hidden = false;
    byId("experience-section").hidden = !data.experiences.length;
    showVersions(data);
    await showDiff(from, to);
    if (experience) await showExperience(experience);
  }

  // Keeps what is shown in the address, so it can be bookmarked and shared.
  function remember(values) {
    const params = new URLSearchParams(location.search);
    for (const [key, value] of Object.entries(values)) params.set(key, value);
    history.replaceState(null, "", `${location.pathname}?${params}`);
  }

  byId("diff-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const from = byId("diff-from").value;
    const to = byId("diff-to").value;
    remember({ from, to });
    showDiff(from, to);
  });
  byId("experience-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const id = byId("experience-id").value;
    remember({ experience: id });
    showExperience(id);
  });
  byId("versions").addEventListener("click", (event) => {
    const link = event.target.closest("a[data-experience]");
    if (!link) return;
    event.preventDefault();
    byId("experience-id").value = link.dataset.experience;
    remember({ experience: link.dataset.experience });
    showExperience(link.dataset.experience).then(() => byId("experience-section").scrollIntoView());
  });

  (async () => {
    try {
      if (name === null) await showList();
      else await showLibrary();
      byId("status").textContent = "";
    } catch (error) {
      showError(byId("status"), `Could not read ${name === null ? "the libraries" : `library ${name}`}: ${error.message}`);
    }
  })();
})();
