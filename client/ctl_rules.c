/*
 * `pyprofd-ctl rules`: the daemon's attach rules, listed, added or removed.
 * The daemon checks every setting; the client only splits KEY=VALUE.
 */
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "export.h"

const char ctl_rules_usage[] =
	"usage: pyprofd-ctl rules [--json]\n"
	"       pyprofd-ctl rules add NAME KEY=VALUE...\n"
	"       pyprofd-ctl rules remove NAME\n"
	"\n"
	"The attach rules, in the order they are tried: the config file's, then those\n"
	"added here.  `add` (root alone) keeps the rule in the daemon's state directory,\n"
	"so it outlives a restart, and judges every running process again; a rule of the\n"
	"same name added before is replaced.  Rules of the config file are changed there.\n"
	"\n"
	"keys: match.exe GLOB, match.cmdline REGEX, match.unit GLOB, match.container\n"
	"      ID-PREFIX|*, match.uid USER|UID, match.python [OP]X.Y, rate HZ,\n"
	"      mode wall|cpu|gil|exception, async true|false, async_mode off|running|all,\n"
	"      context otel|none, context_labels NAME,..., labels K=V,...,\n"
	"      children true|false, exclude true|false\n"
	"\n"
	"example: pyprofd-ctl rules add web match.cmdline='gunicorn|uvicorn' labels=service=web\n"
	"\n"
	"--json prints {\"rules\": [{name, source, line, settings: {KEY: VALUE}}]}.\n";

static json_t *ctl_rules_json(const Pyprofd__RulesResult *r)
{
	json_t *rules = json_array();
	for (size_t i = 0; rules && i < r->n_rules; i++) {
		const Pyprofd__Rule *rule = r->rules[i];
		json_t *settings = json_object();
		for (size_t k = 0; settings && k < rule->n_settings; k++)
			if (json_object_set_new(settings, export_str(rule->settings[k]->key),
			                        export_json_string(rule->settings[k]->value)) != 0)
				json_decref(settings), settings = NULL;
		json_t *one = settings ? json_pack("{s:o,s:o,s:I,s:o}", "name", export_json_string(rule->name),
		                                   "source", export_json_string(rule->source), "line",
		                                   (json_int_t)rule->line, "settings", settings)
		                       : NULL;
		if (!one || json_array_append_new(rules, one) != 0)
			json_decref(rules), rules = NULL;
	}
	return rules ? json_pack("{s:o}", "rules", rules) : NULL;
}

static int ctl_rules_show(struct ctl *ctl, const struct client_reply *reply, int32_t pid)
{
	(void)pid;
	const Pyprofd__RulesResult *r = reply->parts[0]->rules;
	if (!r) {
		fputs("pyprofd-ctl: the daemon's answer holds no rules\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	if (ctl->json)
		return ctl_print_json(ctl_rules_json(r));
	if (r->n_rules == 0)
		puts("no rules: the daemon attaches only what it is asked to");
	for (size_t i = 0; i < r->n_rules; i++) {
		const Pyprofd__Rule *rule = r->rules[i];
		printf("%s[rule.%s]  # %s", i ? "\n" : "", export_str(rule->name), export_str(rule->source));
		if (rule->line)
			printf(":%u", rule->line);
		putchar('\n');
		for (size_t k = 0; k < rule->n_settings; k++)
			printf("%s = %s\n", export_str(rule->settings[k]->key), export_str(rule->settings[k]->value));
	}
	return ctl_finish(EXIT_OK);
}

int ctl_rules(struct ctl *ctl, int argc, char **argv)
{
	int status = ctl_common_options_only(ctl, argc, argv);
	if (status >= 0)
		return status;
	Pyprofd__RulesRequest rules = PYPROFD__RULES_REQUEST__INIT;
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_RULES;
	req.rules = &rules;
	int n = argc - optind;
	char **args = argv + optind;
	if (n == 0) {
		rules.action = PYPROFD__RULES_ACTION__RULES_LIST;
	} else if (strcmp(args[0], "add") == 0) {
		if (n < 3)
			return ctl_usage_error(ctl, "add takes a NAME and at least one KEY=VALUE");
		rules.action = PYPROFD__RULES_ACTION__RULES_ADD;
	} else if (strcmp(args[0], "remove") == 0) {
		if (n != 2)
			return ctl_usage_error(ctl, "remove takes one NAME");
		rules.action = PYPROFD__RULES_ACTION__RULES_REMOVE;
	} else {
		return ctl_usage_error(ctl, "'%s' is not add or remove", args[0]);
	}
	/* Every setting is one argument, so argc bounds their number. */
	Pyprofd__RuleSetting *settings = calloc((size_t)argc + 1, sizeof *settings);
	Pyprofd__RuleSetting **setting_ptrs = calloc((size_t)argc + 1, sizeof *setting_ptrs);
	if (!settings || !setting_ptrs) {
		free(settings);
		free(setting_ptrs);
		fputs("pyprofd-ctl: out of memory\n", stderr);
		return EXIT_FAILURE_OTHER;
	}
	if (n >= 2)
		rules.name = args[1];
	rules.settings = setting_ptrs;
	for (int i = 2; i < n && rules.action == PYPROFD__RULES_ACTION__RULES_ADD; i++) {
		char *eq = strchr(args[i], '=');
		if (!eq || eq == args[i]) {
			free(settings);
			free(setting_ptrs);
			return ctl_usage_error(ctl, "a setting is KEY=VALUE, not '%s'", args[i]);
		}
		*eq = '\0';
		Pyprofd__RuleSetting *kv = &settings[rules.n_settings];
		pyprofd__rule_setting__init(kv);
		kv->key = args[i];
		kv->value = eq + 1;
		setting_ptrs[rules.n_settings++] = kv;
	}
	/* No operands are left for ctl_call_shown to find: they were the request's. */
	optind = argc;
	status = ctl_call_shown(ctl, argc, argv, &req, NULL, ctl_rules_show);
	free(settings);
	free(setting_ptrs);
	return status;
}
