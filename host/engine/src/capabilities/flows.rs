//! `toolgate:policy/flows`: the host's flow labels (see [`crate::flows`]),
//! for the call in hand only.

use crate::bindings::toolgate::policy::flows::{FlowLabel, FlowsError, Host, Located};
use crate::flows::{FlowError, FlowScope, Label};
use crate::sandbox::SandboxState;

impl From<FlowError> for FlowsError {
    fn from(err: FlowError) -> Self {
        match &err {
            FlowError::InvalidKind => FlowsError::InvalidKind,
            FlowError::UnknownPath => FlowsError::UnknownPath,
            FlowError::Full | FlowError::TooLarge => FlowsError::Storage(err.to_string()),
            FlowError::Storage(err) => FlowsError::Storage(err.report()),
        }
    }
}

impl From<Label> for FlowLabel {
    fn from(label: Label) -> Self {
        FlowLabel {
            kind: label.kind,
            source: label.source,
            session_id: label.session,
            at_ms: label.at_ms,
        }
    }
}

impl SandboxState {
    /// The call in hand's scope: none for an operator's command or a spare
    /// being opened.
    fn flow_scope(&self) -> Result<&FlowScope, FlowsError> {
        self.call.flow.as_ref().ok_or(FlowsError::NoCall)
    }

    /// The scope, where this phase may write.
    fn flow_scope_writable(&self) -> Result<&FlowScope, FlowsError> {
        match self.call.read_only {
            true => Err(FlowsError::NoCall),
            false => self.flow_scope(),
        }
    }

    fn logged(&self, err: FlowError) -> FlowsError {
        let why = match &err {
            FlowError::InvalidKind | FlowError::UnknownPath => None,
            FlowError::Storage(cause) => Some(cause.report()),
            FlowError::Full | FlowError::TooLarge => Some(err.to_string()),
        };
        if let Some(why) = why {
            tracing::warn!(policy = %self.call.policy, error = %why, "flow labels failed");
        }
        err.into()
    }
}

impl Host for SandboxState {
    fn label_session(&mut self, kind: String, source: String) -> Result<(), FlowsError> {
        let scope = self.flow_scope_writable()?;
        scope
            .label_session(&*self.call.state, &kind, &source)
            .map_err(|err| self.logged(err))
    }

    fn label_file(&mut self, path: String, kind: String, source: String) -> Result<(), FlowsError> {
        let scope = self.flow_scope_writable()?;
        scope
            .label_file(&*self.call.state, &path, &kind, &source)
            .map_err(|err| self.logged(err))
    }

    fn session_labels(&mut self) -> Result<Vec<FlowLabel>, FlowsError> {
        let scope = self.flow_scope()?;
        let labels = scope
            .session_labels(&*self.call.state)
            .map_err(|err| self.logged(err))?;
        Ok(labels.into_iter().map(FlowLabel::from).collect())
    }

    fn file_labels(&mut self, path: String) -> Result<Vec<FlowLabel>, FlowsError> {
        let scope = self.flow_scope()?;
        let labels = scope
            .file_labels(&*self.call.state, &path)
            .map_err(|err| self.logged(err))?;
        Ok(labels.into_iter().map(FlowLabel::from).collect())
    }

    fn locate(&mut self, path: String) -> Option<Located> {
        let scope = self.call.flow.as_ref()?;
        let real = scope.locate(&path).ok()?;
        Some(Located {
            in_project: scope.in_project(&real),
            path: real.to_string_lossy().into_owned(),
        })
    }
}
