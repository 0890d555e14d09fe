//! Herald plugin ABI. The WIT package lives in `wit/`; it is defined by the plugin-platform issue.
