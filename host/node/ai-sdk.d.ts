// Types for `toolgate/ai-sdk` (ai-sdk.js).

import type { DecideOptions, Pause, Toolgate } from "./index.js";

export interface GatedTools<TOOLS> {
  /** The same tools, each call asked of toolgate first. */
  tools: TOOLS;
  /** The pause behind a tool-approval request, while it waits. */
  pauseFor(toolCallId: string): Pause | null;
}

export declare function gateTools<TOOLS extends Record<string, object>>(
  gate: Toolgate,
  tools: TOOLS,
  options?: DecideOptions,
): GatedTools<TOOLS>;
