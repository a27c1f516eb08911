//! The native floor: the bundled policies' own logic as plain native Rust,
//! doing their store reads and writes directly on toolgate's store — no
//! sandbox, no host calls, no decision log. What a decision would cost if
//! the policies were compiled into the host; shared by the `decide`
//! benchmark (all three policies) and the peer comparison (lease-gate and
//! context-cost, the rule Cedar and Rego are given).

use std::sync::Arc;

use lease_gate::catalogue::Catalogue;
use lease_gate::gate::{GateInput, GateOutcome};
use lease_gate::leases::Lease;
use shadow_sentinel::classify::Tier;
use toolgate::request::Origin;
use toolgate::store::{Store, StoredEvent};
use toolgate::{ToolRequest, Verdict};
use toolgate_guest::ExecutionMode;

pub struct Floor {
    pub store: Arc<Store>,
    catalogue: Catalogue,
    patterns: Vec<toolgate_guest::glob::Glob>,
    max_probes: u32,
    probe: Option<toolgate::probe::ProbeClient>,
    cost: context_cost::budget::CostConfig,
}

impl Floor {
    pub fn new(store: Arc<Store>, max_probes: u32, probe_url: Option<&str>) -> Self {
        Self {
            store,
            catalogue: Catalogue::new(&Default::default(), None),
            patterns: shadow_sentinel::config::SentinelConfig::default().probe_patterns,
            max_probes,
            probe: probe_url.map(|url| {
                toolgate::probe::ProbeClient::new(&toolgate::config::ProbeConfig {
                    endpoint: Some(url.into()),
                    model: String::new(),
                    api_key_env: None,
                    max_timeout_ms: 2000,
                })
            }),
            cost: Default::default(),
        }
    }

    /// context-cost with this config instead of its defaults.
    #[allow(dead_code)] // the `decide` benchmark keeps the defaults
    pub fn with_cost(mut self, cost: context_cost::budget::CostConfig) -> Self {
        self.cost = cost;
        self
    }

    /// The three policies in their default priority order.
    #[allow(dead_code)] // the peer comparison composes its own two
    pub fn decide(&self, request: &ToolRequest) -> Verdict {
        if !self.lease_gate(request) {
            return Verdict::Deny;
        }
        self.shadow_sentinel(request);
        if !self.context_cost(request) {
            return Verdict::Deny;
        }
        Verdict::Allow
    }

    /// lease-gate: the thread's leases (listed, then read and parsed), its
    /// plan and auto-approval markers, and the gate's judgement. Whether it
    /// allows.
    pub fn lease_gate(&self, request: &ToolRequest) -> bool {
        let thread = request.thread();
        let prefix = format!("lease/{thread}/");
        let lease = self
            .store
            .state()
            .state_keys("lease-gate", &prefix, 256)
            .unwrap()
            .iter()
            .filter_map(|k| self.store.state().state_get("lease-gate", k).unwrap())
            .filter_map(|b| serde_json::from_slice::<Lease>(&b).ok())
            .find(|l| l.is_valid(toolgate::now_ms()) && l.actions.covers(&request.tool));
        let _planned = self
            .store
            .state()
            .state_get("lease-gate", &format!("planned/{thread}"))
            .unwrap();
        let _auto = self
            .store
            .state()
            .state_get("lease-gate", &format!("auto/{}/{thread}", request.user_id))
            .unwrap();
        let spec = self.catalogue.spec(&request.tool);
        let outcome = lease_gate::gate::evaluate(&GateInput {
            action: &request.tool,
            spec,
            thread,
            has_lease: lease.is_some(),
            mode: ExecutionMode::InteractiveAutoApprove,
            auto_approved: false,
            approved_now: false,
            credential_present: false,
            preview: "",
        });
        matches!(outcome, GateOutcome::Allow)
    }

    /// shadow-sentinel: classify, and for a risky call take a unit of the
    /// turn's probe budget, read the context and ask the model.
    fn shadow_sentinel(&self, request: &ToolRequest) {
        let from_mcp = matches!(request.origin, Origin::Mcp(_));
        let (category, _) =
            shadow_sentinel::classify::classify(&request.tool, from_mcp, &self.patterns);
        let Some((pool, limit)) = shadow_sentinel::budget::pool(category, self.max_probes) else {
            return;
        };
        if category == Tier::Low || limit == 0 {
            return;
        }
        let key = shadow_sentinel::budget::counter_key(&request.session_id, request.turn, pool);
        if self
            .store
            .state()
            .state_try_increment("shadow-sentinel", &key, limit, u64::MAX)
            .unwrap()
            .is_none()
        {
            return;
        }
        let hidden = ["probe_result".to_string()];
        let mut events = self
            .store
            .events()
            .tool_history(
                "shadow-sentinel",
                &request.tool,
                &request.session_id,
                10,
                &hidden,
            )
            .unwrap();
        events.extend(
            self.store
                .events()
                .session_recent("shadow-sentinel", &request.session_id, 10, &hidden)
                .unwrap(),
        );
        let context: Vec<toolgate_guest::host::Event> = events
            .into_iter()
            .map(|e| toolgate_guest::host::Event {
                session_id: e.session_id,
                turn: e.turn,
                kind: e.kind,
                tool: e.tool,
                origin: None,
                risk: None,
                detail: e.detail,
                summary: e.summary,
                at_ms: e.at_ms,
            })
            .collect();
        let prompt =
            shadow_sentinel::probe::user_prompt(&request.tool, &request.arguments_json(), &context);
        if let Some(probe) = &self.probe {
            let _ = probe.ask(shadow_sentinel::probe::SYSTEM_PROMPT, &prompt, 2000);
        }
        self.store.events().append_event(StoredEvent {
            policy: "shadow-sentinel".into(),
            session_id: request.session_id.clone(),
            turn: request.turn,
            kind: "probe_result".into(),
            tool: Some(request.tool.clone()),
            origin: None,
            risk: None,
            detail: Some("allow".into()),
            summary: Some("probe allowed".into()),
            at_ms: toolgate::now_ms(),
        });
    }

    /// context-cost: the reported context size against the budget. Whether
    /// it allows.
    pub fn context_cost(&self, request: &ToolRequest) -> bool {
        let tokens = request.context_tokens.unwrap_or(0);
        context_cost::budget::evaluate_cost(tokens, &self.cost)
            != context_cost::budget::Standing::Exceeded
    }
}
