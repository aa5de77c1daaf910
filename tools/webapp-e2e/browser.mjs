// How the browser test and the benchmark start Debian's chromium: headless, with no sandbox (the
// tests run as root), with every background connection off (this machine's network is closed, and
// chromium would retry its refused connections), in a profile of the caller's.

import fs from 'node:fs';

import { chromium } from 'playwright-core';

export const CHROMIUM = process.env.CAIRN_CHROMIUM || '/usr/bin/chromium';

export const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Closes `context` (at most 5 s: a wedged browser must not hang the caller) and deletes `profile`. */
export async function close(context, profile) {
  if (context) await Promise.race([context.close().catch(() => {}), new Promise((r) => setTimeout(r, 5000))]);
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
}

/** A persistent context in `profile` (a fresh directory), 1280×900; `options` add to or override. */
export function launch(profile, options = {}) {
  return chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport: { width: 1280, height: 900 },
    // Chromium's start on a loaded 2-core machine (the default is 30 s).
    timeout: 90_000,
    ...options,
  });
}
