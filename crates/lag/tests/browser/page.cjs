// Drives kshard's web page in headless Chromium (Debian's package) through
// playwright-core, as a user would, and checks what it shows. Run by
// crates/lag/tests/page.rs, which starts the broker's groups and kshard:
//
//   node page.cjs <walk|scale> '<JSON expectations>'
//
// Prints one JSON line with timings on success; exits 1 with the reason on
// failure. Screenshots go to the expectations' `artifacts` directory.
'use strict';

const path = require('path');
const fs = require('fs');

const [mode, json] = process.argv.slice(2);
const want = JSON.parse(json);
const { chromium } = require(require.resolve('playwright-core', { paths: [want.playwright] }));

function check(cond, what) {
  if (!cond) throw new Error(what);
}

// Flags for a machine without the internet: no background fetches, which
// this network refuses.
const FLAGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'];

async function withPage(run) {
  const browser = await chromium.launch({ executablePath: want.chromium, headless: true, args: FLAGS });
  const problems = [];
  const external = [];
  try {
    const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, locale: 'en-US' });
    const page = await context.newPage();
    page.setDefaultTimeout(30000);
    // The page must fetch nothing but kshard's own address.
    await page.route('**/*', route => {
      const url = route.request().url();
      if (url.startsWith(want.base)) return route.continue();
      external.push(url);
      return route.abort();
    });
    page.on('pageerror', e => problems.push(`page error: ${e.message}`));
    // The browser logs a 404 as an error; the last step asks for a group
    // that does not exist on purpose.
    page.on('console', m => {
      if (m.type() === 'error' && !(page.expect404 && m.text().includes('status of 404'))) problems.push(`console error: ${m.text()}`);
    });
    const result = await run(page);
    check(external.length === 0, `the page fetched from elsewhere: ${external.join(', ')}`);
    check(problems.length === 0, problems.join('\n'));
    return result;
  } finally {
    await browser.close();
  }
}

const shot = (page, name, fullPage = false) => page.screenshot({ path: path.join(want.artifacts, name), fullPage });

// The overview's rows as shown: group id, status badge, the lost cell.
const rows = page => page.$$eval('#rows tr[data-group]', trs => trs.map(tr => ({
  group: tr.dataset.group,
  status: tr.querySelector('.badge').textContent,
  lagTime: tr.children[7].textContent,
  lost: tr.children[8].textContent,
  lostMarked: tr.children[8].classList.contains('lost'),
})));

// Waits until the overview shows `n` rows; says what it shows if it never does.
async function rowsCount(page, n, what) {
  try {
    await page.waitForFunction(n => document.querySelectorAll('#rows tr[data-group]').length === n, n, { timeout: 15000 });
  } catch (e) {
    const now = (await rows(page)).map(r => `${r.group} ${r.status}`);
    throw new Error(`${what}: expected ${n} rows, the page shows ${now.length}: ${now.join(', ')}`);
  }
}

async function walk(page) {
  const t0 = Date.now();
  await page.goto(want.base);
  await page.waitForSelector('#rows tr[data-group]');
  const firstRows = Date.now() - t0;

  // Overview: the most urgent first, by status (ERR, WARN, OK).
  const severity = { ERR: 3, WARN: 2, OK: 1 };
  let shown = await rows(page);
  check(shown.length === 100, `the first page shows 100 rows, not ${shown.length}`);
  for (let i = 1; i < shown.length; i++) {
    check(severity[shown[i - 1].status] >= severity[shown[i].status],
      `rows out of order: ${shown[i - 1].group} (${shown[i - 1].status}) before ${shown[i].group} (${shown[i].status})`);
  }
  const text = await page.textContent('#shown');
  check(text.includes(`${want.total} groups`), `the overview counts ${want.total} groups: "${text}"`);
  check((await page.textContent('#page-of')) === 'page 1 of 2', 'two pages of groups');
  const byId = Object.fromEntries(shown.map(r => [r.group, r]));
  for (const g of want.err) {
    check(byId[g] && byId[g].status === 'ERR', `${g} is ERR on the first page: ${JSON.stringify(byId[g])}`);
  }
  check(byId[want.lost] && byId[want.lost].lostMarked && byId[want.lost].lost === String(want.lostRecords),
    `${want.lost} is marked with ${want.lostRecords} records lost: ${JSON.stringify(byId[want.lost])}`);
  await shot(page, 'overview.png');

  // The second page.
  await page.click('#next');
  await page.waitForFunction(() => document.querySelector('#page-of').textContent === 'page 2 of 2');
  shown = await rows(page);
  check(shown.length === want.total - 100, `the second page shows the other ${want.total - 100} rows, not ${shown.length}`);
  await page.click('#prev');

  // Filters: by text (group or topic), by status, lagging and records lost.
  await page.fill('#filter', want.filter);
  await rowsCount(page, want.filterMatches.length, `filter "${want.filter}"`);
  shown = await rows(page);
  check(JSON.stringify(shown.map(r => r.group).sort()) === JSON.stringify([...want.filterMatches].sort()),
    `filter "${want.filter}" shows ${shown.map(r => r.group)}`);
  check(page.url().includes(`q=${encodeURIComponent(want.filter)}`), `the filter is in the address: ${page.url()}`);
  await shot(page, 'filtered.png');
  await page.fill('#filter', '');
  await page.selectOption('#status-filter', 'ERR');
  await rowsCount(page, want.err.length, 'status ERR');
  shown = await rows(page);
  check(shown.every(r => r.status === 'ERR'), 'the ERR filter shows ERR groups only');
  await page.selectOption('#status-filter', '');
  await page.check('#lost-only');
  await rowsCount(page, 1, 'records lost only');
  check((await rows(page))[0].group === want.lost, 'records lost only shows the group that lost records');
  await page.uncheck('#lost-only');

  // A group's page: facts, chart of lag over time, partitions and members.
  await page.fill('#filter', want.live);
  await page.click(`#rows a[href="#/group/${encodeURIComponent(want.live)}"]`);
  await page.waitForSelector('#group:not([hidden]) #facts div');
  check((await page.textContent('#group-title')) === want.live, 'the group page is titled with the group');
  // The history grows with kshard's refreshes; the page follows every 5 s.
  await page.waitForFunction(n => Number(document.querySelector('#chart-records').dataset.points || 0) >= n &&
    Number(document.querySelector('#chart-seconds').dataset.points || 0) >= n, want.minPoints, { timeout: 60000 });
  const partitions = await page.$$eval('#partitions tr', trs => trs.map(tr => [...tr.children].map(td => td.textContent)));
  check(partitions.length === want.livePartitions, `${want.livePartitions} partitions listed, not ${partitions.length}`);
  check(partitions.every(p => p[p.length - 1].includes(want.liveClient)), `every partition shows its consumer ${want.liveClient}: ${JSON.stringify(partitions)}`);
  check(partitions.some(p => /\d \/ \d/.test(p[10])), `a partition shows its rates in / out: ${JSON.stringify(partitions)}`);
  const members = await page.$$eval('#members tr', trs => trs.map(tr => tr.textContent));
  check(members.length === 1 && members[0].includes(want.liveClient), `one member, ${want.liveClient}: ${members}`);
  const polyline = await page.$eval('#chart-records polyline', l => l.getAttribute('points').trim().split(/\s+/).length);
  check(polyline >= want.minPoints, `the records chart draws ${polyline} points`);
  // Its objective, measured by kshard since it started: under an hour of
  // lag all along, its budget whole.
  await page.waitForFunction(() => {
    const row = document.querySelector('#objectives tr[data-objective="fresh"]');
    return row && /100\.0%/.test(row.querySelector('.budget-left').textContent);
  }, null, { timeout: 60000 });
  const fresh = await page.textContent('#objectives tr[data-objective="fresh"]');
  check(/^fresh1 h 00 m99\.9% of 30 dOK100\.000%0\.0×/.test(fresh) && /0 s of 43 m 12 s$/.test(fresh), `the objective's row: ${fresh}`);
  check(/measured by this kshard over/.test(await page.textContent('#objectives-note')), 'the objectives say since when they count');
  await shot(page, 'group.png', true);

  // Back to the overview, filter kept.
  await page.goBack();
  await page.waitForSelector('#overview:not([hidden]) #rows tr[data-group]');
  check((await page.inputValue('#filter')) === want.live, 'back restores the filter');

  // The group that lost records, its partition marked; "all groups" goes
  // back to the overview as it was filtered.
  await page.goto(`${want.base}#/group/${encodeURIComponent(want.lost)}`);
  await page.waitForSelector('#partitions tr.lost-row');
  await shot(page, 'group-records-lost.png', true);
  await page.click('#back');
  await page.waitForSelector('#overview:not([hidden]) #rows tr[data-group]');
  check((await page.inputValue('#filter')) === want.live, '"all groups" keeps the filter');

  // A group that stopped behind records written a while ago: over a
  // second of lag, it has spent the 3.6 s its tight objective allows an hour.
  await page.goto(`${want.base}#/group/${encodeURIComponent(want.stopped)}`);
  await page.waitForFunction(() => {
    const row = document.querySelector('#objectives tr[data-objective="tight"]');
    return row && /missed/.test(row.querySelector('.budget-left').textContent);
  }, null, { timeout: 60000 });
  const tight = await page.textContent('#objectives tr[data-objective="tight"]');
  check(/^tight1\.0 s99\.9% of 1 h 00 mERR/.test(tight) && / of 3\.6 s$/.test(tight), `the missed objective's row: ${tight}`);
  check((await page.$$('#objectives tr')).length === 2, 'both objectives cover the stopped group');
  await shot(page, 'group-objectives.png', true);
  // The overview says so beside the group.
  await page.goto(`${want.base}#/?q=${encodeURIComponent(want.stopped)}`);
  await page.waitForSelector(`#rows tr[data-group="${want.stopped}"] .objective-missed`);
  const missed = await page.textContent(`#rows tr[data-group="${want.stopped}"] .objective-missed`);
  check(missed === 'missed: tight', `the overview marks the missed objective: ${missed}`);

  // A group id with '/', '?', '#', '%', '&' and '..' in it: its own page.
  await page.goto(`${want.base}#/group/${encodeURIComponent(want.odd)}`);
  await page.waitForSelector('#partitions tr td .badge');
  check((await page.textContent('#group-title')) === want.odd, `the odd group's page: ${await page.textContent('#group-title')}`);
  check((await page.$$('#partitions tr')).length === 1, 'its one partition');

  // A share group: its start offsets, and its delivery state as bars.
  await page.goto(`${want.base}#/group/${encodeURIComponent(want.share)}`);
  await page.waitForSelector('#share-section:not([hidden]) .share-row svg rect.d-avail');
  check((await page.textContent('#committed-head')) === 'start offset', 'a share group shows start offsets');
  const shareRow = await page.textContent('#share-bars .share-row');
  check(/start 5 · end 10/.test(shareRow), `the share-partition from its start offset to its end: ${shareRow}`);
  await shot(page, 'group-share.png', true);

  // A streams group: its members' tasks and its topology.
  await page.goto(`${want.base}#/group/${encodeURIComponent(want.streams)}`);
  await page.waitForSelector('#topology-section:not([hidden]) #topology tr');
  await page.waitForFunction(() => /active tasks 0_0 0_1 0_2/.test(document.querySelector('#members').textContent), null, { timeout: 60000 });
  await shot(page, 'group-streams.png', true);

  // A group that does not exist says so.
  page.expect404 = true;
  await page.goto(`${want.base}#/group/${encodeURIComponent('no such group/anywhere')}`);
  await page.waitForFunction(() => document.querySelector('#banner').textContent.startsWith('no group'));
  return { first_rows_ms: firstRows };
}

async function scale(page) {
  const t0 = Date.now();
  await page.goto(want.base);
  await page.waitForSelector('#rows tr[data-group]');
  const firstRows = Date.now() - t0;
  const text = await page.textContent('#shown');
  const total = want.total.toLocaleString('en-US');
  check(text.includes(`${total} groups`), `the overview counts ${total} groups: "${text}"`);
  check((await page.textContent('#page-of')) === `page 1 of ${Math.ceil(want.total / 100)}`, 'pages of 100 groups');
  const shown = await page.$$eval('#rows tr[data-group]', trs => trs.length);
  check(shown === 100, `100 rows on a page, not ${shown}`);
  await shot(page, 'overview-10k.png');
  // Typing narrows 10,000 groups to one: how long until the table shows it.
  const t1 = Date.now();
  await page.fill('#filter', want.filter);
  await rowsCount(page, 1, `filter "${want.filter}"`);
  const filterMs = Date.now() - t1;
  // A group's page among 10,000.
  const t2 = Date.now();
  await page.click('#rows a');
  await page.waitForSelector('#group:not([hidden]) #partitions tr');
  const groupMs = Date.now() - t2;
  // Time for one refresh of the overview, measured in the page.
  await page.goBack();
  await page.waitForSelector('#overview:not([hidden]) #rows tr[data-group]');
  const refreshMs = await page.evaluate(async () => {
    const t = performance.now();
    await loadOverview();
    return performance.now() - t;
  });
  const bytes = await page.evaluate(async () => (await (await fetch('api/overview')).text()).length);
  return { first_rows_ms: firstRows, filter_ms: filterMs, group_page_ms: groupMs, refresh_ms: Math.round(refreshMs), overview_bytes: bytes };
}

fs.mkdirSync(want.artifacts, { recursive: true });
withPage(mode === 'scale' ? scale : walk)
  .then(result => { console.log(JSON.stringify(result)); })
  .catch(e => { console.error(`page check failed: ${e.stack || e}`); process.exit(1); });
