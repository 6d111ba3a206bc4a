// Loads each console page in Debian's headless chromium (playwright-core,
// the system browser) and times it: from the navigation's start until the
// page shows its data. Usage: node bench/console.mjs URL TOKEN ID ROUNDS MID
// (ID: an invocation to open; MID: an id half way back, to page from).
// Prints a Markdown row per page.
import { chromium } from "playwright-core";

const [url, token, id, rounds = "10", mid] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage();
await page.goto(`${url}/console/#/login`);
await page.fill("#token", token);
await page.click("#login");
await page.waitForSelector("#logout");

const pages = [
  ["functions", "#/functions", "[data-fn=hello] canvas"],
  ["invocations", "#/invocations", "tr.link"],
  ["invocations, errors only", "#/invocations?status=error", "tr.link"],
  ["invocations, 100 from half way back", `#/invocations?before=${mid}`, "tr.link"],
  ["invocation", `#/invocation/${id}`, "#outcome"],
  ["cluster", "#/cluster", "text=invocations running"],
];
for (const [name, hash, ready] of pages) {
  const ms = [];
  for (let i = 0; i < Number(rounds); i++) {
    // A fresh document each time: scripts parsed, the API asked again.
    await page.goto("about:blank");
    const t0 = Date.now();
    await page.goto(`${url}/console/${hash}`);
    await page.waitForSelector(ready, { timeout: 30000 });
    ms.push(Date.now() - t0);
  }
  ms.sort((a, b) => a - b);
  console.log(`| ${name} | ${ms[Math.floor(ms.length / 2)]} | ${ms[ms.length - 1]} |`);
}
await browser.close();
