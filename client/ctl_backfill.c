/*
 * pyprofd-ctl export: a range of the history sent by the daemon to an
 * OpenTelemetry Collector as OTLP profiles, by hand (a backfill).  The
 * daemon reads and sends; this only asks and says what was sent.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ctl.h"

const char ctl_backfill_usage[] =
	"usage: pyprofd-ctl export --otlp URL [--pid P | --label K=V]... [--since D | --from T [--until T]]\n"
	"\n"
	"The daemon sends the history of the selected processes over the range to the\n"
	"OpenTelemetry Collector at URL (OTLP/HTTP, POST to URL/v1development/profiles),\n"
	"one request per process.  What the exporter of [export.otlp] sends is not\n"
	"affected.  Root's (and the daemon's user's) alone.\n"
	"\n"
	"  --otlp URL        http://host:4318 or https://...\n"
	"  --pid P           one process\n"
	"  --label K=V       processes attached with this label; repeat: all must match\n"
	"  --since D         the last D: 90s, 15m, 2h, 1d\n"
	"  --from T, --until T  unix seconds or local YYYY-MM-DDTHH:MM[:SS]\n"
	"  --json            the result as one JSON object: processes, samples, bytes\n";

int ctl_backfill(struct ctl *ctl, int argc, char **argv)
{
	static const struct option options[] = {
		{"otlp", required_argument, NULL, 'o'}, {"pid", required_argument, NULL, 'p'},
		{"label", required_argument, NULL, 'l'}, {"since", required_argument, NULL, 's'},
		{"from", required_argument, NULL, 'f'}, {"until", required_argument, NULL, 'u'},
		CTL_COMMON_OPTIONS,
	};
	Pyprofd__OtlpExportRequest r = PYPROFD__OTLP_EXPORT_REQUEST__INIT;
	/* Every label is one argument: argc bounds their number. */
	Pyprofd__Label *labels = calloc((size_t)argc, sizeof *labels);
	Pyprofd__Label **label_ptrs = calloc((size_t)argc, sizeof *label_ptrs);
	double since = -1;
	int status = EXIT_OK, opt;
	if (!labels || !label_ptrs) {
		fprintf(stderr, "pyprofd-ctl: out of memory\n");
		status = EXIT_FAILURE_OTHER;
		goto out;
	}
	r.labels = label_ptrs;
	r.endpoint = NULL;
	while (status == EXIT_OK && (opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
		switch (opt) {
		case 'o':
			r.endpoint = optarg;
			break;
		case 'p': {
			uint32_t u;
			status = ctl_parse_u32(ctl, "--pid", optarg, 1, &u);
			if (status == EXIT_OK && u > INT32_MAX)
				status = ctl_usage_error(ctl, "'%s' is not a process id", optarg);
			r.pid = (int32_t)u;
			break;
		}
		case 'l':
			if ((status = ctl_parse_label(ctl, optarg, &labels[r.n_labels])) == EXIT_OK) {
				r.labels[r.n_labels] = &labels[r.n_labels];
				r.n_labels++;
			}
			break;
		case 's':
			if (duration_parse(optarg, 0, CTL_DURATION_MAX, &since) != 0)
				status = ctl_usage_error(ctl, "--since takes a duration such as 90s, 15m, 2h or 1d");
			break;
		case 'f':
		case 'u': {
			double t = ctl_history_parse_time(optarg);
			if (t < 0)
				status = ctl_usage_error(ctl, "--%s takes unix seconds or YYYY-MM-DDTHH:MM[:SS]",
				                         opt == 'f' ? "from" : "until");
			*(opt == 'f' ? &r.from_unix : &r.until_unix) = t;
			break;
		}
		default:
			if ((status = ctl_common_option(ctl, opt, argv)) < 0)
				status = EXIT_OK;
			else
				goto out; /* --help, or a usage error said */
		}
	}
	if (status != EXIT_OK || (status = ctl_no_operand(ctl, argc, argv)) != EXIT_OK)
		goto out;
	if (!r.endpoint) {
		status = ctl_usage_error(ctl, "--otlp URL is needed: where to send");
		goto out;
	}
	if (strncmp(r.endpoint, "http://", 7) != 0 && strncmp(r.endpoint, "https://", 8) != 0) {
		status = ctl_usage_error(ctl, "--otlp takes an http:// or https:// URL, not '%s'", r.endpoint);
		goto out;
	}
	if (since >= 0) {
		if (r.from_unix || r.until_unix) {
			status = ctl_usage_error(ctl, "--since and --from/--until do not go together");
			goto out;
		}
		r.from_unix = floor(clock_wall_s()) - since;
	} else if (!r.from_unix) {
		status = ctl_usage_error(ctl, "--since D or --from T is needed: how far back to send");
		goto out;
	}
	if (r.until_unix && r.until_unix < r.from_unix) {
		status = ctl_usage_error(ctl, "--until is before --from");
		goto out;
	}
	Pyprofd__Request req = PYPROFD__REQUEST__INIT;
	req.body_case = PYPROFD__REQUEST__BODY_OTLP_EXPORT;
	req.otlp_export = &r;
	struct client_reply *reply = ctl_call(ctl, &req, &status);
	if (!reply)
		goto out;
	const Pyprofd__OtlpExportResult *res = reply->parts[0]->otlp_export;
	if (!res) {
		fprintf(stderr, "pyprofd-ctl: the daemon's answer has no export result\n");
		status = EXIT_FAILURE_OTHER;
	} else if (ctl->json) {
		status = ctl_print_json(json_pack("{s:I, s:I, s:I}", "processes", (json_int_t)res->processes,
		                                  "samples", (json_int_t)res->samples, "bytes",
		                                  (json_int_t)res->bytes));
	} else {
		printf("sent %llu samples of %u processes to %s (%llu bytes)\n",
		       (unsigned long long)res->samples, res->processes, r.endpoint,
		       (unsigned long long)res->bytes);
		status = ctl_finish(EXIT_OK);
	}
	client_reply_free(reply);
out:
	free(labels);
	free(label_ptrs);
	return status;
}
