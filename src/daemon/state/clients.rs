//! The clients: registered over D-Bus, changed, checked against one another, and taken anew
//! from a reloaded config.

use super::memory::managed_limit;
use super::*;

impl State {
    // ---- management (the D-Bus side) ----

    fn requests_with(&self, name: &str, request: f64) -> Vec<(String, f64)> {
        let mut all: Vec<(String, f64)> = self
            .clients
            .values()
            .filter(|c| c.spec.name != name && c.origin != Origin::Default)
            .map(|c| (c.spec.name.clone(), c.spec.share.request))
            .collect();
        all.push((name.to_string(), request));
        all
    }

    fn check_sum(&self, name: &str, request: f64) -> Result<(), StateError> {
        let all = self.requests_with(name, request);
        check_request_sum(all.iter().map(|(n, r)| (n.as_str(), *r)))
            .map_err(StateError::InvalidArgument)
    }

    /// Adds a client; a `runtime` one is kept only until the host reboots (see
    /// [`State::registered_specs`]).
    pub fn register(&mut self, spec: ClientSpec, runtime: bool) -> Result<(), StateError> {
        check_client_name(&spec.name).map_err(StateError::InvalidArgument)?;
        if spec.name.starts_with("user.") {
            return Err(StateError::InvalidArgument(
                "names starting with \"user.\" are kept for users' default clients".into(),
            ));
        }
        spec.share
            .check(&spec.name)
            .map_err(StateError::InvalidArgument)?;
        if self.clients.contains_key(&spec.name) {
            return Err(StateError::InvalidArgument(format!(
                "client {:?} already exists",
                spec.name
            )));
        }
        self.check_sum(&spec.name, spec.share.request)?;
        let name = spec.name.clone();
        self.insert_client(spec, Origin::Registered);
        if let Some(c) = self.clients.get_mut(&name) {
            c.runtime = runtime;
        }
        self.emit(Event::Changed { client: name });
        Ok(())
    }

    /// The clients registered over D-Bus, as they stand now: those kept until the host reboots
    /// (`runtime`), or the others.
    pub fn registered_specs(&self, runtime: bool) -> Vec<ClientSpec> {
        self.clients
            .values()
            .filter(|c| c.origin == Origin::Registered && c.runtime == runtime)
            .map(|c| c.spec.clone())
            .collect()
    }

    pub fn unregister(&mut self, name: &str) -> Result<(), StateError> {
        let c = self.clients.get(name).ok_or_else(|| unknown(name))?;
        match c.origin {
            Origin::Registered => {}
            Origin::Config => {
                return Err(StateError::InvalidArgument(format!(
                    "client {name:?} comes from {}; remove it there",
                    self.config_path.display()
                )))
            }
            Origin::Default => {
                return Err(StateError::InvalidArgument(format!(
                    "client {name:?} is a user's default client; it goes when its processes do"
                )))
            }
        }
        if !c.sessions.is_empty() {
            return Err(StateError::InvalidArgument(format!(
                "client {name:?} has {} attached processes; stop them first",
                c.sessions.len()
            )));
        }
        self.remove_client(name);
        self.emit(Event::Changed {
            client: name.to_string(),
        });
        Ok(())
    }

    /// Makes a client interactive (latency class) or batch.
    pub fn set_interactive(&mut self, name: &str, interactive: bool) -> Result<(), StateError> {
        let c = self.clients.get(name).ok_or_else(|| unknown(name))?;
        let share = Share {
            interactive,
            ..c.spec.share
        };
        self.apply_share(name, share)
    }

    /// Changes a client's request, limit and/or memory cap (None leaves a value as it is).
    pub fn set_share(
        &mut self,
        name: &str,
        request: Option<f64>,
        limit: Option<f64>,
        memory: Option<Option<u64>>,
    ) -> Result<(), StateError> {
        let c = self.clients.get(name).ok_or_else(|| unknown(name))?;
        let mut share = c.spec.share;
        share.request = request.unwrap_or(share.request);
        share.limit = limit.unwrap_or(share.limit);
        if let Some(m) = memory {
            share.memory = m;
        }
        self.apply_share(name, share)
    }

    fn apply_share(&mut self, name: &str, share: Share) -> Result<(), StateError> {
        let c = self.clients.get(name).ok_or_else(|| unknown(name))?;
        share.check(name).map_err(StateError::InvalidArgument)?;
        if c.origin != Origin::Default {
            self.check_sum(name, share.request)?;
        }
        let id = c.id;
        let now = self.now();
        self.sched.set_client(id, shares(&share), now);
        if let Some(c) = self.clients.get_mut(name) {
            c.spec.share = share;
        }
        self.refresh_fair_factors();
        self.emit(Event::Changed {
            client: name.to_string(),
        });
        self.dispatch();
        Ok(())
    }

    /// Changes how a client's memory is served; processes attached already keep the mode they
    /// attached with, new ones get this.
    pub fn set_memory_mode(&mut self, name: &str, mode: MemoryMode) -> Result<(), StateError> {
        let c = self.clients.get_mut(name).ok_or_else(|| unknown(name))?;
        mode.check(name, c.spec.share.memory)
            .map_err(StateError::InvalidArgument)?;
        c.spec.memory_mode = mode;
        self.emit(Event::Changed {
            client: name.to_string(),
        });
        Ok(())
    }

    /// Applies a newly loaded config, or records why it could not be applied. The old config
    /// keeps running on any error.
    pub fn apply_config(&mut self, loaded: Result<Config, String>) -> Result<(), String> {
        let result = loaded.and_then(|new| {
            // Registered clients stay; together with the new file's clients the requests must fit.
            let registered: Vec<(String, f64)> = self
                .clients
                .values()
                .filter(|c| {
                    c.origin == Origin::Registered && !new.clients.contains_key(&c.spec.name)
                })
                .map(|c| (c.spec.name.clone(), c.spec.share.request))
                .collect();
            // An entry the file did not change keeps the request set at run time.
            let all = new
                .clients
                .values()
                .map(|c| {
                    let request = self
                        .run_time_spec(c)
                        .map_or(c.share.request, |kept| kept.share.request);
                    (c.name.clone(), request)
                })
                .chain(registered)
                .collect::<Vec<_>>();
            check_request_sum(all.iter().map(|(n, r)| (n.as_str(), *r))).map_err(|e| {
                format!(
                    "{}: {e} (counting clients registered over D-Bus, and the requests set at run \
                     time of entries the file did not change)",
                    self.config_path.display()
                )
            })?;
            Ok(new)
        });
        match result {
            Ok(new) => {
                self.swap_config(new);
                self.config_error = None;
                self.emit(Event::ConfigReloaded {
                    ok: true,
                    message: String::new(),
                });
                Ok(())
            }
            Err(message) => {
                self.config_error = Some(message.clone());
                self.reload_failures += 1;
                self.emit(Event::ConfigReloaded {
                    ok: false,
                    message: message.clone(),
                });
                Err(message)
            }
        }
    }

    fn swap_config(&mut self, new: Config) {
        let gone: Vec<String> = self
            .clients
            .values()
            .filter(|c| {
                c.origin == Origin::Config
                    && !new.clients.contains_key(&c.spec.name)
                    && c.sessions.is_empty()
            })
            .map(|c| c.spec.name.clone())
            .collect();
        for name in gone {
            self.remove_client(&name);
            self.emit(Event::Changed { client: name });
        }
        let now = self.now();
        for spec in new.clients.values() {
            if self.run_time_spec(spec).is_some() {
                continue;
            }
            match self.clients.get_mut(&spec.name) {
                Some(c) => {
                    if c.spec != *spec || c.origin != Origin::Config {
                        c.spec = spec.clone();
                        c.origin = Origin::Config;
                        self.sched.set_client(c.id, shares(&spec.share), now);
                        let _ = self.events.send(Event::Changed {
                            client: spec.name.clone(),
                        });
                    }
                }
                None => {
                    self.insert_client(spec.clone(), Origin::Config);
                    self.emit(Event::Changed {
                        client: spec.name.clone(),
                    });
                }
            }
        }
        // Users' default clients follow the new defaults where those changed for their user (a
        // share set at run time stays otherwise).
        let defaults: Vec<(String, Share)> = self
            .clients
            .values()
            .filter(|c| c.origin == Origin::Default)
            .filter_map(|c| {
                let user = c.spec.name.trim_start_matches("user.").to_string();
                let share = new.defaults_for(&user, &[]);
                (share != self.config.defaults_for(&user, &[]))
                    .then(|| (c.spec.name.clone(), share))
            })
            .collect();
        for (name, share) in defaults {
            if let Some(c) = self.clients.get_mut(&name) {
                if c.spec.share != share {
                    c.spec.share = share;
                    self.sched.set_client(c.id, shares(&share), now);
                }
            }
        }
        self.sched
            .set_quantum(new.daemon.quantum.as_nanos() as Nanos);
        self.sched
            .set_grace(new.daemon.lease_grace.as_nanos() as Nanos);
        self.sched
            .set_burst_window(new.daemon.burst_window.as_nanos() as Nanos);
        self.sched
            .set_slots(new.daemon.concurrent_leases, new.daemon.overlap_by_demand);
        self.config = new;
        self.managed_limit = managed_limit(&self.config);
        if self.config.daemon.fairshare_half_life.is_none() {
            self.fair_usage = None;
        }
        self.refresh_fair_factors();
        self.dispatch();
    }
}

impl State {
    /// The running spec of a config client whose entry in the file is `spec` unchanged since the
    /// running config: what was set at run time (gpushare set) stays over a reload, or the
    /// watcher's reload after an edit of another entry.
    fn run_time_spec(&self, spec: &ClientSpec) -> Option<&ClientSpec> {
        if self.config.clients.get(&spec.name) != Some(spec) {
            return None;
        }
        self.clients
            .get(&spec.name)
            .filter(|c| c.origin == Origin::Config)
            .map(|c| &c.spec)
    }
}

pub(super) fn unknown(name: &str) -> StateError {
    StateError::UnknownClient(format!("there is no client named {name:?}"))
}
