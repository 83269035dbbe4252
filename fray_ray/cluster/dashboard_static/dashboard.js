// fray_ray dashboard: keeps the server-rendered panels current and streams the selected job's log.
// The server renders (and escapes) every panel; this script swaps the fragments in, and adds log
// lines as text, never as HTML.
(function () {
  "use strict";
  const main = document.querySelector("main[data-job]");
  if (!main) return;
  const job = main.dataset.job;
  const MAX_LOG_LINES = 5000;

  async function getJson(url) {
    const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (response.status === 401) {
      window.location.reload(); // the session ended: the server shows the login form
      throw new Error("logged out");
    }
    if (!response.ok) throw new Error(url + ": HTTP " + response.status);
    return response.json();
  }

  function every(ms, work) {
    async function tick() {
      try {
        await work();
      } catch (error) {
        document.getElementById("updated").textContent = "not updating: " + error.message;
      }
      window.setTimeout(tick, ms);
    }
    window.setTimeout(tick, ms);
  }

  const query = job ? "?job=" + encodeURIComponent(job) : "";
  every(2000, async function () {
    const panels = await getJson("/dashboard/api/panels" + query);
    for (const [name, html] of Object.entries(panels)) {
      const element = document.getElementById(name);
      if (element) element.innerHTML = html;
    }
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  });
  every(3000, async function () {
    const sessions = await getJson("/dashboard/api/sessions");
    document.getElementById("sessions").innerHTML = sessions.html;
  });

  const log = document.getElementById("log");
  if (!job || !log) return;
  let cursor = 0;
  async function pollLog() {
    const page = await getJson("/dashboard/api/logs?job=" + encodeURIComponent(job) + "&cursor=" + cursor);
    cursor = page.cursor;
    if (!page.lines.length) return;
    const follow = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    const lines = page.lines.map(function (line) {
      const stamp = new Date(line.ms).toLocaleTimeString();
      return "[" + stamp + " task " + line.task + ":" + line.attempt + " " + line.source + "] " + line.text;
    });
    log.append(document.createTextNode(lines.join("\n") + "\n"));
    while (log.childNodes.length > MAX_LOG_LINES / 10) log.removeChild(log.firstChild);
    if (follow) log.scrollTop = log.scrollHeight;
    document.getElementById("log-state").textContent = "live, " + cursor + " lines read";
  }
  pollLog().catch(function () {});
  every(1000, pollLog);
})();
