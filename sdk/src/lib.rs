//! Herald plugin SDK. Filled in by the plugin-platform issue.
