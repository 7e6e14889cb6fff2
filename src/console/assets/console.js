// stacksync console: live updates, the lost-connection banner, copy buttons, and opening a
// preview file. Served from the binary as /assets/console.js (the Content-Security-Policy
// allows no inline script). The pages work without it; it only keeps them current.
"use strict";

(function () {
  const main = document.getElementById("content");
  const banner = document.getElementById("banner");
  const topics = (document.body.dataset.watch || "").split(/\s+/).filter(Boolean);
  let timer = null;
  let inFlight = false;
  let again = false;
  let lost = false;

  function wanted(kind, key) {
    if (kind === "*") return topics.length > 0;
    return topics.some(function (t) {
      if (t === "*") return true;
      const slash = t.indexOf("/");
      const tKind = t.slice(0, slash);
      const tKey = t.slice(slash + 1);
      return tKind === kind && (tKey === "*" || key === "*" || tKey === key);
    });
  }

  // Someone typing in a form of the page keeps what they typed: the update waits.
  function busy() {
    const a = document.activeElement;
    return a && main.contains(a) && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName);
  }

  function schedule(delay) {
    if (timer) return;
    timer = setTimeout(function () {
      timer = null;
      refresh();
    }, delay);
  }

  function refresh() {
    if (busy()) {
      schedule(1000);
      return;
    }
    if (inFlight) {
      again = true;
      return;
    }
    inFlight = true;
    const url = location.href;
    fetch(url, { headers: { "X-Console-Fragment": "1" }, cache: "no-store", credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.text();
      })
      .then(function (html) {
        if (location.href !== url) return;
        const focus = focusKey();
        main.innerHTML = html;
        if (focus) refocus(focus);
        document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || "0") + 1);
      })
      .catch(function () {
        /* the event stream's error handler says when the console is gone */
      })
      .finally(function () {
        inFlight = false;
        if (again) {
          again = false;
          schedule(100);
        }
      });
  }

  // A keyboard user's place survives an update: the focused control of <main> is found again
  // in the new content by its id, else by what it is (tag, link, text), else by its position.
  const FOCUSABLE = "a[href], button, input, select, textarea, [tabindex]";

  function focusKey() {
    const a = document.activeElement;
    if (!a || a === main || !main.contains(a)) return null;
    return {
      id: a.id,
      tag: a.tagName,
      href: a.getAttribute("href"),
      text: a.textContent,
      index: Array.prototype.indexOf.call(main.querySelectorAll(FOCUSABLE), a),
    };
  }

  function refocus(k) {
    const all = Array.prototype.slice.call(main.querySelectorAll(FOCUSABLE));
    const same =
      (k.id && document.getElementById(k.id)) ||
      all.find(function (e) {
        return e.tagName === k.tag && e.getAttribute("href") === k.href && e.textContent === k.text;
      }) ||
      all[Math.min(k.index, all.length - 1)];
    if (same) same.focus({ preventScroll: true });
  }

  function say(text) {
    banner.textContent = text;
    banner.hidden = !text;
    document.body.dataset.connection = text ? "lost" : "live";
  }

  function connect() {
    if (!topics.length || !window.EventSource) return;
    const es = new EventSource("/events");
    es.onopen = function () {
      if (lost) {
        lost = false;
        say("");
        refresh(); // what changed while the connection was down
      } else {
        document.body.dataset.connection = "live";
      }
    };
    es.addEventListener("change", function (e) {
      const space = e.data.indexOf(" ");
      if (wanted(e.data.slice(0, space), e.data.slice(space + 1))) schedule(150);
    });
    es.onerror = function () {
      lost = true;
      say("The connection to the console is lost: what you see may be out of date. Reconnecting…");
      if (es.readyState === EventSource.CLOSED) {
        setTimeout(connect, 2000);
      }
    };
  }

  document.addEventListener("click", function (e) {
    const button = e.target.closest("button.copy");
    if (!button) return;
    const source = document.getElementById(button.dataset.copy);
    if (source && navigator.clipboard) {
      navigator.clipboard.writeText(source.textContent).then(function () {
        button.textContent = "Copied";
      });
    }
  });

  document.addEventListener("change", function (e) {
    if (e.target.id !== "preview-file" || !e.target.files.length) return;
    const reader = new FileReader();
    reader.onload = function () {
      document.getElementById("preview-text").value = reader.result;
      e.target.form.submit();
    };
    reader.readAsText(e.target.files[0]);
  });

  connect();
})();
