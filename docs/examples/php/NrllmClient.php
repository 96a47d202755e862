<?php
/*
 * A small client of the nr-llm sidecar's HTTP API (/api/v1) for a host application: plain PHP 8.2 with
 * the curl extension, no Composer. docs/host-guide.md explains each call; walkthrough.php uses them all.
 *
 * Every answer that is not the expected status throws NrllmError with the status and the error body
 * ({"code", "message", "errors"?}). GET requests, and POST requests that carry an Idempotency-Key, are
 * retried on a failed connection and on 503 / 429 (after Retry-After): doing them twice is safe.
 */

declare(strict_types=1);

final class NrllmError extends RuntimeException
{
    /** @param array<string, mixed>|null $body the decoded error body, when it was JSON */
    public function __construct(
        public readonly int $status,
        public readonly ?array $body,
        public readonly string $raw,
    ) {
        $code = $body['code'] ?? 'no_code';
        $message = $body['message'] ?? $raw;
        parent::__construct("HTTP $status $code: $message");
    }

    /** The contract's error code, e.g. `pause_not_pending`; null for an answer without one. */
    public function errorCode(): ?string
    {
        return $this->body['code'] ?? null;
    }
}

final class NrllmClient
{
    private const MAX_ATTEMPTS = 5;
    private const MAX_RETRY_AFTER = 30;

    public function __construct(
        private readonly string $baseUrl,
        private readonly string $token,
        private readonly string $actor,
        private readonly string $workspace = '0',
        private readonly int $timeoutSeconds = 60,
    ) {
    }

    /** The same connection acting for another actor (an approver, say). */
    public function asActor(string $actor): self
    {
        return new self($this->baseUrl, $this->token, $actor, $this->workspace, $this->timeoutSeconds);
    }

    /** A fresh Idempotency-Key: store it with the thing you are about to create, and reuse it on retries. */
    public static function newKey(): string
    {
        return bin2hex(random_bytes(16));
    }

    // -- the endpoints a host uses ------------------------------------------------------------------

    /** @return array<string, mixed> */
    public function health(): array
    {
        return $this->request('GET', '/api/v1/health', expect: [200, 503]);
    }

    /** @param list<array<string, mixed>> $consumers every consumer of run statuses the host has loaded */
    public function reportConsumers(array $consumers): array
    {
        return $this->request('PUT', '/api/v1/consumers', ['consumers' => $consumers]);
    }

    public function compat(): array
    {
        return $this->request('GET', '/api/v1/compat');
    }

    /** @param array<string, mixed> $spec the body of POST /api/v1/runs */
    public function createRun(array $spec, string $idempotencyKey): array
    {
        return $this->request('POST', '/api/v1/runs', $spec, ['Idempotency-Key: ' . $idempotencyKey], [201]);
    }

    public function run(string $runId): array
    {
        return $this->request('GET', '/api/v1/runs/' . rawurlencode($runId));
    }

    /** Events after sequence $after (up to 1000 per answer; page with the last sequence you saw). */
    public function events(string $runId, int $after = 0): array
    {
        return $this->request('GET', '/api/v1/runs/' . rawurlencode($runId) . '/events?after=' . $after)['items'];
    }

    public function inbox(): array
    {
        return $this->request('GET', '/api/v1/inbox')['items'];
    }

    /**
     * Decide the pause the run waits on. mode "now": 200 and the Run when its segment ends; mode
     * "store": 202 and a receipt, and a worker continues the run.
     */
    public function decide(string $runId, array $decision, string $idempotencyKey): array
    {
        return $this->request('POST', '/api/v1/runs/' . rawurlencode($runId) . '/decision', $decision,
            ['Idempotency-Key: ' . $idempotencyKey], [200, 202]);
    }

    public function cancel(string $runId): array
    {
        return $this->request('POST', '/api/v1/runs/' . rawurlencode($runId) . '/cancel');
    }

    public function setGrants(string $actor, array $grants, string $workspace = '0'): array
    {
        return $this->request('PUT', '/api/v1/actors/' . rawurlencode($actor) . '/grants',
            ['workspace' => $workspace, 'grants' => $grants]);
    }

    /** Poll the run until it is no longer queued or running (or $timeoutSeconds pass); returns the Run. */
    public function waitWhileBusy(string $runId, float $timeoutSeconds = 60.0, float $intervalSeconds = 0.5): array
    {
        $deadline = microtime(true) + $timeoutSeconds;
        while (true) {
            $run = $this->run($runId);
            if (!in_array($run['status'], ['queued', 'running'], true) || microtime(true) > $deadline) {
                return $run;
            }
            usleep((int) ($intervalSeconds * 1e6));
        }
    }

    /**
     * Follow the run's server-sent events from sequence $after: $onEvent gets each event (sequence, kind,
     * at, payload) as it is written. Returns the Run that ends the stream (terminal or waiting).
     */
    public function follow(string $runId, int $after, callable $onEvent): array
    {
        $buffer = '';
        $final = null;
        $handle = $this->handle('GET', '/api/v1/runs/' . rawurlencode($runId) . '/events?after=' . $after,
            null, ['Accept: text/event-stream']);
        curl_setopt($handle, CURLOPT_TIMEOUT, 0); // a stream lasts as long as the run needs
        curl_setopt($handle, CURLOPT_WRITEFUNCTION, function ($_, string $chunk) use (&$buffer, &$final, $onEvent) {
            $buffer .= $chunk;
            while (($end = strpos($buffer, "\n\n")) !== false) {
                $message = substr($buffer, 0, $end);
                $buffer = substr($buffer, $end + 2);
                $fields = ['event' => 'message', 'data' => ''];
                foreach (explode("\n", $message) as $line) {
                    if ($line === '' || $line[0] === ':') {
                        continue; // a keep-alive comment
                    }
                    [$name, $value] = array_pad(explode(':', $line, 2), 2, '');
                    $fields[$name] = ltrim($value, ' ');
                }
                $data = json_decode($fields['data'], true);
                if ($fields['event'] === 'run_event') {
                    $onEvent($data);
                } elseif ($fields['event'] === 'run') {
                    $final = $data;
                }
            }
            return strlen($chunk);
        });
        $raw = curl_exec($handle);
        $status = curl_getinfo($handle, CURLINFO_RESPONSE_CODE);
        if ($raw === false && $final === null) {
            throw new NrllmError(0, null, 'stream failed: ' . curl_error($handle));
        }
        if ($status !== 200) {
            throw new NrllmError($status, json_decode($buffer, true), $buffer);
        }
        if ($final === null) {
            throw new NrllmError($status, null, 'the stream ended before the run was terminal or waiting');
        }
        return $final;
    }

    // -- the transport ------------------------------------------------------------------------------

    /**
     * One request; JSON in and out. Retried (at most 5 attempts) when that is safe: GET, PUT, or a
     * request carrying an Idempotency-Key, after a failed connection or a 503 / 429 answer.
     *
     * @param list<int> $expect the statuses that are success here
     * @return array<string, mixed>
     */
    public function request(string $method, string $path, ?array $body = null, array $headers = [],
                            array $expect = [200]): array
    {
        $retryable = $method === 'GET' || $method === 'PUT'
            || (bool) preg_grep('/^Idempotency-Key:/i', $headers);
        for ($attempt = 1; ; $attempt++) {
            $responseHeaders = [];
            $handle = $this->handle($method, $path, $body, $headers);
            curl_setopt($handle, CURLOPT_HEADERFUNCTION, function ($_, string $line) use (&$responseHeaders) {
                $parts = explode(':', $line, 2);
                if (count($parts) === 2) {
                    $responseHeaders[strtolower(trim($parts[0]))] = trim($parts[1]);
                }
                return strlen($line);
            });
            $raw = curl_exec($handle);
            $status = curl_getinfo($handle, CURLINFO_RESPONSE_CODE);
            $failed = $raw === false ? curl_error($handle) : null;
            $again = $retryable && $attempt < self::MAX_ATTEMPTS
                && ($failed !== null || $status === 503 || $status === 429);
            if ($again) {
                $wait = (int) ($responseHeaders['retry-after'] ?? 0) ?: $attempt;
                sleep(min($wait, self::MAX_RETRY_AFTER));
                continue;
            }
            if ($failed !== null) {
                throw new NrllmError(0, null, "$method $path failed: $failed");
            }
            $decoded = $raw === '' ? [] : json_decode((string) $raw, true);
            if (!in_array($status, $expect, true)) {
                throw new NrllmError($status, is_array($decoded) ? $decoded : null, (string) $raw);
            }
            if (!is_array($decoded)) {
                throw new NrllmError($status, null, "$method $path: the answer is not JSON: $raw");
            }
            return $decoded;
        }
    }

    /** @return \CurlHandle */
    private function handle(string $method, string $path, ?array $body, array $headers)
    {
        $handle = curl_init(rtrim($this->baseUrl, '/') . $path);
        $all = array_merge([
            'Authorization: Bearer ' . $this->token,
            'X-Nrllm-Actor: ' . $this->actor,
            'X-Nrllm-Workspace: ' . $this->workspace,
        ], $headers);
        if (!preg_grep('/^Accept:/i', $headers)) {
            $all[] = 'Accept: application/json';
        }
        curl_setopt_array($handle, [
            CURLOPT_CUSTOMREQUEST => $method,
            CURLOPT_RETURNTRANSFER => true,
            CURLOPT_CONNECTTIMEOUT => 10,
            CURLOPT_TIMEOUT => $this->timeoutSeconds,
        ]);
        if ($body !== null) {
            $all[] = 'Content-Type: application/json';
            curl_setopt($handle, CURLOPT_POSTFIELDS, json_encode((object) $body, JSON_THROW_ON_ERROR));
        }
        curl_setopt($handle, CURLOPT_HTTPHEADER, $all);
        return $handle;
    }
}
