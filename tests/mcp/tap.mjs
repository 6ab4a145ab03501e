// The test scripts' output: TAP lines ("ok N - what", "not ok N - what: detail"), counted, and
// the exit status from the count. Shared by sdk-client.mjs, sdk-sessions.mjs, sdk-hooks.mjs
// and soak.mjs.
export const tap = { passed: 0, failed: 0 };

export function check(cond, what, detail) {
  if (cond) {
    tap.passed++;
    console.log(`ok ${tap.passed + tap.failed} - ${what}`);
  } else {
    tap.failed++;
    console.log(`not ok ${tap.passed + tap.failed} - ${what}${detail !== undefined ? `: ${JSON.stringify(detail).slice(0, 800)}` : ""}`);
  }
  return cond;
}

// Prints the counts and exits: 1 when any check failed.
export function finish() {
  // the last line, which scripts/check.sh reads to count these checks in its total
  console.log(`${tap.passed} passed, ${tap.failed} failed`);
  process.exit(tap.failed ? 1 : 0);
}
