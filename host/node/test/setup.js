// What the package's tests share: the real `toolgate` binary (the driver,
// tests/embed_node.rs, names it in TOOLGATE_BIN), a config over the real
// bundled policies (tests/embed/policies.toml, in TOOLGATE_TEST_POLICIES), a
// store per test, and the
// store's daemon when a test needs a person to answer.

import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { Toolgate, ToolgateError } from "toolgate";

const TOKEN = "node-tests-channel-token";


/** The file the driver (tests/embed_node.rs) names in `variable`. */
function named(variable) {
  const path = process.env[variable];
  if (!path || !existsSync(path)) {
    throw new Error(`${variable} must name a file: run these tests with \`cargo test --test suite embed_node::\``);
  }
  return path;
}

/** The real `toolgate` binary. */
export const binary = () => named("TOOLGATE_BIN");

/** The operator's rules over the bundled policies (tests/embed/policies.toml). */
const policies = () => readFileSync(named("TOOLGATE_TEST_POLICIES"), "utf8");

/**
 * The native addon itself, under the package's typed layer: the one the
 * package loads (built in its tree, or its platform package).
 */
export function addon() {
  const require = createRequire(import.meta.resolve("toolgate"));
  const native = new URL("./native/", import.meta.resolve("toolgate"));
  const built = existsSync(native) && readdirSync(native).find((f) => f.endsWith(".node"));
  if (built) {
    return require(new URL(built, native).pathname);
  }
  const libc = process.report.getReport().header.glibcVersionRuntime ? "gnu" : "musl";
  return require(`@toolgate/${process.platform}-${process.arch}-${libc}`);
}

/** A config, a store, and what a person would run; `t.after` cleans up. */
export class Setup {
  constructor(t) {
    this.dir = mkdtempSync(join(tmpdir(), "toolgate-node-"));
    this.store = join(this.dir, "toolgate.redb");
    this.config = join(this.dir, "toolgate.toml");
    const digest = createHash("sha256").update(TOKEN).digest("hex");
    // A socket of its own, so that waiting for the daemon never opens the
    // store in this process instead (it would hold the store from the daemon).
    this.socket = join(this.dir, "toolgate.sock");
    writeFileSync(
      this.config,
      `${policies()}\n[daemon]\nsocket = "${this.socket}"\n\n[approvals.tokens]\nci = "${digest}"\n`,
    );
    this.token = join(this.dir, "ci.token");
    writeFileSync(this.token, `${TOKEN}\n`);
    this.daemon = null;
    t.after(() => this.stop());
  }

  toolgate(options = {}) {
    return Toolgate.open({ config: this.config, store: this.store, ...options });
  }

  command(...args) {
    return spawnSync(binary(), ["--config", this.config, "--store", this.store, ...args], {
      encoding: "utf8",
      timeout: 120_000,
    });
  }

  /** Start the store's daemon and wait until a host reaches it. */
  async serve() {
    this.daemon = spawn(binary(), ["--config", this.config, "--store", this.store, "serve"], {
      stdio: "ignore",
    });
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      try {
        if ((await this.toolgate({ socket: this.socket })).throughDaemon) return;
      } catch (err) {
        if (!(err instanceof ToolgateError)) throw err;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error("the toolgate daemon did not answer within 60 s");
  }

  /** A person answers a pause through a channel adapter with its token. */
  personAnswers(requestId, decision = "approve") {
    const done = this.command(
      "gates", "resolve", "--request-id", requestId, "--decision", decision,
      "--channel", "ci", "--token-file", this.token,
    );
    if (done.status !== 0) throw new Error(`gates resolve failed: ${done.stderr}`);
  }

  async stop() {
    if (this.daemon) {
      const exited = new Promise((resolve) => this.daemon.once("exit", resolve));
      this.daemon.kill("SIGTERM");
      await exited;
      this.daemon = null;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
