/*
 * A packed request's POST to a collector's /v1development/profiles, with
 * libcurl: compressed, with the configured headers, within the timeout, a
 * partial success read from the answer as the failure it is.  Used by the
 * sender's thread and by backfills; nothing here runs on the loop.
 */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "otlp.h"
#include "otlp_profiles.pb-c.h"
#include "vocab.h"

#define OTLP_PATH "/v1development/profiles"
/* Bytes of an answer kept: a partial success, or the start of an error page. */
#define OTLP_MAX_ANSWER 65536

struct otlp_answer {
	char *data;
	size_t len;
};

static size_t otlp_on_answer(char *ptr, size_t size, size_t nmemb, void *ctx)
{
	struct otlp_answer *a = ctx;
	size_t n = size * nmemb, keep = n;
	if (a->len + keep > OTLP_MAX_ANSWER)
		keep = OTLP_MAX_ANSWER - a->len;
	if (keep) {
		char *grown = realloc(a->data, a->len + keep + 1);
		if (!grown)
			return 0;
		a->data = grown;
		memcpy(a->data + a->len, ptr, keep);
		a->len += keep;
		a->data[a->len] = '\0';
	}
	return n;
}

struct otlp_progress {
	bool (*cancelled)(void *ctx);
	void *ctx;
};

static int otlp_on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                            curl_off_t ulnow)
{
	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	const struct otlp_progress *p = ctx;
	return p->cancelled && p->cancelled(p->ctx) ? 1 : 0;
}

/* body gzip'ed into *out (malloc'd).  0, or -1. */
static int otlp_gzip(const uint8_t *body, size_t len, uint8_t **out, size_t *out_len)
{
	z_stream z = {0};
	if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -1;
	uLong bound = deflateBound(&z, (uLong)len);
	uint8_t *buf = malloc(bound);
	if (!buf) {
		deflateEnd(&z);
		return -1;
	}
	z.next_in = (Bytef *)body;
	z.avail_in = (uInt)len;
	z.next_out = buf;
	z.avail_out = (uInt)bound;
	int rc = deflate(&z, Z_FINISH);
	*out_len = z.total_out;
	deflateEnd(&z);
	if (rc != Z_STREAM_END) {
		free(buf);
		return -1;
	}
	*out = buf;
	return 0;
}

/* The collector's URL for profiles: the endpoint, unless it names the path already. */
static char *otlp_url(const char *endpoint)
{
	size_t n = strlen(endpoint), p = strlen(OTLP_PATH);
	if (n >= p && strcmp(endpoint + n - p, OTLP_PATH) == 0)
		return strdup(endpoint);
	while (n && endpoint[n - 1] == '/')
		n--;
	char *url = malloc(n + p + 1);
	if (url) {
		memcpy(url, endpoint, n);
		memcpy(url + n, OTLP_PATH, p + 1);
	}
	return url;
}

void otlp_global_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

int otlp_post(void **handle, const struct otlp_config *oc, const char *endpoint, const uint8_t *body,
              size_t len, bool (*cancelled)(void *ctx), void *cancel_ctx, uint64_t *wire_bytes,
              char *why, size_t why_len)
{
	CURL *curl = *handle;
	if (!curl && !(curl = *handle = curl_easy_init())) {
		snprintf(why, why_len, "cannot start an HTTP client");
		return -1;
	}
	curl_easy_reset(curl);
	char *url = otlp_url(endpoint);
	uint8_t *zipped = NULL;
	size_t zipped_len = 0;
	struct curl_slist *headers = NULL;
	struct otlp_answer answer = {0};
	struct otlp_progress progress = {cancelled, cancel_ctx};
	int result = -1;
	if (!url || (oc->gzip && otlp_gzip(body, len, &zipped, &zipped_len) < 0)) {
		snprintf(why, why_len, "out of memory");
		goto done;
	}
	const uint8_t *send = zipped ? zipped : body;
	size_t send_len = zipped ? zipped_len : len;
	headers = curl_slist_append(headers, "Content-Type: application/x-protobuf");
	if (zipped)
		headers = curl_slist_append(headers, "Content-Encoding: gzip");
	/* No "Expect: 100-continue": a collector answers the whole request in one go. */
	headers = curl_slist_append(headers, "Expect:");
	for (size_t i = 0; headers && i < oc->headers.n; i++) {
		char line[1200];
		snprintf(line, sizeof line, "%s: %s", oc->headers.keys[i], oc->headers.values[i]);
		headers = curl_slist_append(headers, line);
	}
	if (!headers) {
		snprintf(why, why_len, "out of memory");
		goto done;
	}
	long timeout_ms = (long)(oc->timeout_s * 1000);
	curl_easy_setopt(curl, CURLOPT_URL, url);
	curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(curl, CURLOPT_POST, 1L);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDS, (const char *)send);
	curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)send_len);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
	curl_easy_setopt(curl, CURLOPT_USERAGENT, "pyprofd/" PYPROFD_VERSION);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, otlp_on_answer);
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
	curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, otlp_on_progress);
	curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &progress);
	char detail[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, detail);
	CURLcode rc = curl_easy_perform(curl);
	/* The buffer is this call's: the handle outlives it, and curl may write errors later (at cleanup). */
	curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, NULL);
	if (rc != CURLE_OK) {
		/*
		 * curl's own words for what failed (with the host and port), and
		 * the errno of a failed connect: "Connection refused" (nothing
		 * listens) and "No route to host" call for different fixes, which
		 * its code alone does not tell apart.  Only then: a handle keeps
		 * the errno of an earlier transfer's connect.
		 */
		long os_errno = 0;
		if (rc == CURLE_COULDNT_CONNECT)
			curl_easy_getinfo(curl, CURLINFO_OS_ERRNO, &os_errno);
		snprintf(why, why_len, "POST %s: %s%s%s%s", url,
		         rc == CURLE_ABORTED_BY_CALLBACK ? "cancelled" : detail[0] ? detail : curl_easy_strerror(rc),
		         os_errno ? " (" : "", os_errno ? strerror((int)os_errno) : "", os_errno ? ")" : "");
		goto done;
	}
	*wire_bytes += send_len;
	long status = 0;
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	if (status < 200 || status > 299) {
		/* The first line of what it said, for the operator. */
		size_t n = answer.data ? strcspn(answer.data, "\r\n") : 0;
		snprintf(why, why_len, "POST %s: HTTP %ld%s%.*s", url, status, n ? ": " : "",
		         (int)(n > 160 ? 160 : n), answer.data ? answer.data : "");
		goto done;
	}
	Pyprofd__Otlp__ExportProfilesServiceResponse *r =
		answer.len ? pyprofd__otlp__export_profiles_service_response__unpack(
				     NULL, answer.len, (const uint8_t *)answer.data)
			   : NULL;
	if (r && r->partial_success && r->partial_success->rejected_profiles > 0) {
		snprintf(why, why_len, "POST %s: the collector rejected %lld profiles: %.160s", url,
		         (long long)r->partial_success->rejected_profiles,
		         r->partial_success->error_message);
		pyprofd__otlp__export_profiles_service_response__free_unpacked(r, NULL);
		goto done;
	}
	if (r)
		pyprofd__otlp__export_profiles_service_response__free_unpacked(r, NULL);
	result = 0;
done:
	curl_slist_free_all(headers);
	free(answer.data);
	free(zipped);
	free(url);
	return result;
}

double otlp_post_retry_after(void *handle)
{
	curl_off_t seconds = 0;
	if (!handle || curl_easy_getinfo(handle, CURLINFO_RETRY_AFTER, &seconds) != CURLE_OK || seconds < 0)
		return 0;
	return (double)seconds;
}

void otlp_post_free(void **handle)
{
	if (*handle)
		curl_easy_cleanup(*handle);
	*handle = NULL;
}
