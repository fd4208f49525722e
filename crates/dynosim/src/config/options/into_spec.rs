//! The one entry of validation: [`ReplayOptions::into_spec`] runs the groups of checks in the
//! reference's order and joins their typed parts into a [`ReplaySpec`].
//!
//! INTERFACE
//! - [`ReplayOptions::into_spec`]: options in, a validated spec or the first usage error out.

use super::checks::Choices;
use super::planner::check_planner_budget;
use super::router::attach_router_aic;
use super::ReplayOptions;
use crate::config::ReplaySpec;
use crate::error::Result;

impl ReplayOptions {
    /// Validates every option (frontend.md §1.3–§1.5, workload.md §7.1) and builds the spec.
    /// Every failure is a usage error whose message names the flag.
    pub fn into_spec(self) -> Result<ReplaySpec> {
        let using_trace_file = !self.trace_files.is_empty();
        let choices = Choices::of(&self);
        self.check_front(&choices, using_trace_file)?;
        let engines = self.parse_engines()?;
        let router_config = self.parse_router_config()?;
        let router_aic = self.check_aic_flags()?;
        let planner = self.check_planner(&choices, using_trace_file, &engines)?;
        let mut spec = if using_trace_file {
            self.into_trace_spec(&choices, engines, router_config)?
        } else {
            self.into_synthetic_spec(&choices, engines, router_config)?
        };
        attach_router_aic(&mut spec, router_aic)?;
        if let Some(planner) = planner {
            check_planner_budget(&spec, &planner)?;
            spec.planner = Some(planner);
        }
        Ok(spec)
    }
}
