/* The rules request: list the attach rules, or add or remove one of those added by RPC. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pyprofd.h"
#include "rpc_handlers.h"

/* Every rule, in the order they are tried. */
static Pyprofd__RulesResult *rpc_rules_list(const struct rules *rs, struct arena *a)
{
	Pyprofd__RulesResult *res = ARENA_MESSAGE(a, Pyprofd__RulesResult, PYPROFD__RULES_RESULT__INIT);
	if (!res || !(res->rules = arena_alloc(a, (rs->n ? rs->n : 1) * sizeof *res->rules)))
		return NULL;
	for (size_t i = 0; i < rs->n; i++) {
		const struct rule *r = &rs->v[i];
		Pyprofd__Rule *p = ARENA_MESSAGE(a, Pyprofd__Rule, PYPROFD__RULE__INIT);
		if (!p || !(p->settings = arena_alloc(a, (r->settings.n ? r->settings.n : 1) * sizeof *p->settings)))
			return NULL;
		p->name = r->name;
		p->source = r->source;
		p->line = r->line;
		for (size_t k = 0; k < r->settings.n; k++) {
			Pyprofd__RuleSetting *kv = ARENA_MESSAGE(a, Pyprofd__RuleSetting, PYPROFD__RULE_SETTING__INIT);
			if (!kv)
				return NULL;
			kv->key = r->settings.keys[k];
			kv->value = r->settings.values[k];
			p->settings[p->n_settings++] = kv;
		}
		res->rules[res->n_rules++] = p;
	}
	return res;
}

/*
 * List the rules, or add or remove one of those added by RPC (root alone:
 * a rule attaches every user's processes).  A change is written to the
 * daemon's rules file before it takes effect, so it outlives a restart
 * and a full disk changes nothing.
 */
void rpc_rules(struct server *s, struct client *c, const Pyprofd__Request *req,
               Pyprofd__Response *resp, struct arena *a)
{
	const Pyprofd__RulesRequest *r = req->rules;
	struct rules *rs = &s->config.rules;
	if (r->action != PYPROFD__RULES_ACTION__RULES_LIST) {
		if (c->uid != 0) {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_PERMISSION,
			          "permission denied: only root may change the attach rules");
			return;
		}
		if (!rule_name_ok(r->name)) {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST,
			          "a rule's name is 1 to 64 letters, digits, '_', '.' or '-'");
			return;
		}
		size_t at = rs->n;
		for (size_t i = 0; i < rs->n; i++)
			if (strcmp(rs->v[i].name, r->name) == 0)
				at = i;
		if (at < rs->n && strcmp(rs->v[at].source, "rpc") != 0) {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST,
			          "rule '%s' is in %s: change it there (and send SIGHUP)", r->name,
			          rs->v[at].source);
			return;
		}
		char why[512];
		if (r->action == PYPROFD__RULES_ACTION__RULES_REMOVE) {
			if (at == rs->n) {
				rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "there is no rule '%s'",
				          r->name);
				return;
			}
			if (rules_save_without(rs, at, s->config.rules_path, why, sizeof why) != 0) {
				rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_INTERNAL, "%s", why);
				return;
			}
			rules_remove_at(rs, at);
			log_info("rule %s removed by uid %d", r->name, (int)c->uid);
		} else if (r->action == PYPROFD__RULES_ACTION__RULES_ADD) {
			bool replacing = at < rs->n;
			struct rule rule;
			rule_init(&rule);
			bool ok = (rule.name = strdup(r->name)) && (rule.source = strdup("rpc"));
			snprintf(why, sizeof why, "out of memory");
			for (size_t i = 0; ok && i < r->n_settings; i++)
				ok = rule_set(&rule, r->settings[i]->key, r->settings[i]->value, s->config.max_rate_hz,
				              why, sizeof why) == 0;
			ok = ok && rule_finish(&rule, why, sizeof why) == 0;
			/* In the file first: a rule that cannot be kept is not taken. */
			ok = ok && rules_save_with(rs, at, &rule, s->config.rules_path, why, sizeof why) == 0;
			if (ok && at < rs->n) {
				rule_free(&rs->v[at]);
				rs->v[at] = rule;
				memset(&rule, 0, sizeof rule);
			} else if (ok) {
				ok = rules_append(rs, &rule) == 0;
				snprintf(why, sizeof why, "out of memory");
			}
			rule_free(&rule);
			if (!ok) {
				rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "%s", why);
				return;
			}
			log_info("rule %s %s by uid %d", r->name, replacing ? "replaced" : "added", (int)c->uid);
		} else {
			rpc_error(resp, a, PYPROFD__ERROR_CODE__ERROR_BAD_REQUEST, "unknown rules action %d",
			          (int)r->action);
			return;
		}
		fleet_rules_changed(&s->fleet);
	}
	Pyprofd__RulesResult *res = rpc_rules_list(rs, a);
	if (!res) {
		rpc_out_of_memory(resp, a);
		return;
	}
	resp->result_case = PYPROFD__RESPONSE__RESULT_RULES;
	resp->rules = res;
}
