// Shared helpers of Gym's pages. Everything is drawn with createElement and textContent:
// no string from the server is ever parsed as markup.
"use strict";

const gym = (() => {
  // el("p", {class: "x", href: "/y"}, "text", child, …): an element whose children are text
  // nodes (strings, numbers) and elements; null and undefined children are skipped.
  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === "text") node.textContent = String(value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function byId(id) {
    return document.getElementById(id);
  }

  // The server's reason from an OpenAI-shaped error body, else the status line.
  async function reason(response) {
    const text = await response.text();
    try {
      const body = JSON.parse(text);
      if (body && body.error && body.error.message) return body.error.message;
    } catch (_) {
      // not JSON: fall through
    }
    return `${response.status} ${response.statusText}`.trim();
  }

  async function getJSON(url) {
    const response = await fetch(url, { headers: { accept: "application/json" } });
    if (!response.ok) throw new Error(await reason(response));
    return response.json();
  }

  // POSTs `body` (a string) as JSON; resolves to {ok, status, body, message}.
  async function postJSON(url, body) {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    });
    if (!response.ok) {
      return { ok: false, status: response.status, message: await reason(response) };
    }
    return { ok: true, status: response.status, body: await response.json() };
  }

  function short(hex, length) {
    const text = String(hex || "");
    return text.length > (length || 12) ? text.slice(0, length || 12) + "…" : text;
  }

  // A hash shown short, whole in its title and for screen readers.
  function hash(hex, length) {
    return el("code", { class: "hash", title: String(hex), "aria-label": String(hex) }, short(hex, length));
  }

  function when(iso) {
    if (!iso) return "";
    const date = new Date(iso);
    if (Number.isNaN(date.getTime())) return String(iso);
    return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  function percent(value) {
    return `${Number(value).toFixed(1)}%`;
  }

  // A word diff: removed words struck through, added words underlined, each with a label
  // screen readers say.
  function words(segments) {
    const node = el("p", { class: "words" });
    segments.forEach((segment, index) => {
      if (index > 0) node.append(" ");
      if (segment.kind === "same") node.append(segment.text);
      else if (segment.kind === "removed") node.append(el("del", { title: "removed" }, segment.text));
      else node.append(el("ins", { title: "added" }, segment.text));
    });
    return node;
  }

  // "run R epoch E step S" and the rest of a provenance, as a definition list.
  function provenance(value) {
    const list = el("dl", { class: "provenance" });
    const row = (term, ...detail) => append(list, [el("dt", {}, term), el("dd", {}, ...detail)]);
    if (!value) return list;
    row("source", value.source);
    if (value.source === "run") {
      row("run", el("code", {}, value.run));
      row("epoch, step", `${value.epoch}, ${value.step}`);
      row("model", value.model);
      row("prompts", hash(value.prompts_hash));
      const v = value.validation;
      if (v) {
        const sign = (x) => (x >= 0 ? "+" : "") + Number(x).toFixed(3);
        row(
          "validation",
          `${v.accepted ? "passed" : "refused"} on ${v.queries} queries × ${v.group_size}: ` +
            `Δ ${sign(v.delta)} [${sign(v.delta_low)}, ${sign(v.delta_high)}], ` +
            `${Number(v.current_mean).toFixed(3)} → ${Number(v.candidate_mean).toFixed(3)}, ` +
            `better on ${v.better || 0}, worse on ${v.worse || 0}`,
        );
      }
    } else if (value.source === "manual") {
      if (value.author) row("by", value.author);
    } else if (value.source === "import") {
      row("file", value.file);
      row("format", value.format);
    }
    return list;
  }

  function evidence(value) {
    if (!value) return null;
    const parts = [];
    if (value.query_ids && value.query_ids.length) {
      parts.push(el("span", {}, "queries ", value.query_ids.map((q, i) => [i ? ", " : "", el("code", {}, q)])));
    }
    if (value.group_rewards && value.group_rewards.length) {
      parts.push(el("span", {}, `group rewards ${value.group_rewards.map((r) => Number(r).toFixed(2)).join(" ")}`));
    }
    if (!parts.length) return null;
    return el("p", { class: "evidence" }, parts.map((p, i) => [i ? "; " : "", p]));
  }

  // How an experience fared in use, and its measured credit (`gym library credit`) once there
  // is one.
  function usage(u) {
    const served = u.served_good || u.served_bad ? ` Served feedback: good ${u.served_good || 0}, bad ${u.served_bad || 0}.` : "";
    const counts = el("p", { class: "usage" }, `In use: injected ${u.injected} times; helpful in ${u.helpful}, harmful in ${u.harmful} paired comparisons.${served}`);
    const c = u.credit;
    if (!c) return [counts];
    const signed = (x) => `${x >= 0 ? "+" : "−"}${Math.abs(Number(x)).toFixed(3)}`;
    const verdict = c.high < 0 ? "it hurts beyond its interval: the library scores higher without it"
      : c.low > 0 ? "it helps beyond its interval" : "its interval includes zero";
    const method = c.method === "shapley" ? `Shapley, ${c.permutations} orders`
      : c.method === "banzhaf" ? `Banzhaf, ${c.pairs} complementary pairs` : "leave-one-out";
    return [counts, el("p", { class: `credit${c.high < 0 ? " harmful" : ""}` },
      `Measured credit: Δ mean reward ${signed(c.delta)} [${signed(c.low)}, ${signed(c.high)}] on ${c.queries} queries × ${c.group_size} at v${c.version} (${method}), ${when(c.measured_at)}; ${verdict}.`)];
  }

  function showError(node, message) {
    clear(node).append(el("p", { class: "error" }, message));
  }

  return { el, append, clear, byId, getJSON, postJSON, short, hash, when, percent, words, provenance, evidence, usage, showError };
})();
