//! OS primitive costs (in progress).
