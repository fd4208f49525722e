//! Timing models: how long a forward pass takes. One narrow interface so that more models
//! (profile tables, AIC) can be added later.
