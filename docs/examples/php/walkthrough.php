<?php
/*
 * The host guide's walkthrough (docs/host-guide.md), end to end against a running sidecar:
 *
 *   NRLLM_URL=http://127.0.0.1:8780 NRLLM_TOKEN=<a host token> NRLLM_ACTOR=be_user:7 \
 *       php docs/examples/php/walkthrough.php
 *
 * It creates a run (scripted provider) whose model asks to call write_note, follows it until it waits
 * for approval, approves the pending call as NRLLM_APPROVER (default: NRLLM_ACTOR, the run's owner, who
 * needs no grant), follows it to `completed` and prints its output. Exit status 0 on success; anything
 * unexpected prints the answer on standard error and exits 1.
 */

declare(strict_types=1);

require __DIR__ . '/NrllmClient.php';

function fail(string $why): never
{
    fwrite(STDERR, "walkthrough failed: $why\n");
    exit(1);
}

function expect(bool $condition, string $why, mixed $answer): void
{
    if (!$condition) {
        fail($why . "\n" . json_encode($answer, JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES));
    }
}

$url = getenv('NRLLM_URL') ?: 'http://127.0.0.1:8780';
$token = getenv('NRLLM_TOKEN') ?: fail('set NRLLM_TOKEN to a host token (nrllm-sidecar token create --role host)');
$actor = getenv('NRLLM_ACTOR') ?: fail('set NRLLM_ACTOR to the actor the runs belong to, e.g. be_user:7');
$approver = getenv('NRLLM_APPROVER') ?: $actor;

$sidecar = new NrllmClient($url, $token, $actor);

try {
    // 1. Is it there? (no token needed; 503 while its database is unavailable)
    $health = $sidecar->health();
    echo "health: {$health['status']} (database {$health['database']}, workers alive {$health['workers_alive']})\n";

    // 2. The compatibility gate: may runs delegate to remote agents? (the host's consumer report decides)
    $compat = $sidecar->compat();
    $delegation = $compat['delegation'];
    echo 'delegation: ' . ($delegation['offered'] ? 'offered' : 'not offered: ' . $delegation['reason']) . "\n";

    // 3. Create a run. The key is stored with whatever the host creates the run for, and sent again on a
    //    retry: the sidecar answers the first run again instead of creating a second one.
    $key = NrllmClient::newKey();
    $spec = [
        'input' => 'Leave a note for the editors of page 42',
        'provider' => 'scripted',
        'script' => [
            ['tool_calls' => [['id' => 'call_1', 'name' => 'write_note',
                               'arguments' => ['text' => 'Page 42 needs a second look']]]],
            ['content' => 'Done: {last_tool_result}'],
        ],
        'tools' => ['write_note'],
        'origin' => 'typo3:walkthrough',
    ];
    $run = $sidecar->createRun($spec, $key);
    $again = $sidecar->createRun($spec, $key);
    expect($again['id'] === $run['id'], 'the same Idempotency-Key created a second run', $again);
    echo "run {$run['id']}: {$run['status']}\n";

    // 4. Follow it (server-sent events) until it stops: here it waits for approval of write_note.
    $run = $sidecar->follow($run['id'], 0, function (array $event): void {
        echo "  event {$event['sequence']} {$event['kind']}\n";
    });
    expect($run['status'] === 'waiting_for_approval', 'the run does not wait for approval', $run);
    $waiting = $run['waiting'];
    foreach ($waiting['pending_calls'] as $call) {
        echo "  asks to call {$call['name']} ({$call['effect']}) with " . json_encode($call['arguments']) . "\n";
    }

    // 5. Approve what was shown, as the approver; mode "now" continues the run inside this request.
    $decided = $sidecar->asActor($approver)->decide($run['id'], [
        'pause_id' => $waiting['pause_id'],
        'generation' => $waiting['generation'],
        'decision' => 'approve',
        'turn_digest' => $waiting['turn_digest'],
        'comment' => 'approved by the walkthrough',
        'mode' => 'now',
    ], NrllmClient::newKey());
    echo "decided by $approver: {$decided['status']}\n";

    // 6. A decide-now answer is the run as its segment left it; poll in case a worker still holds it.
    $run = $sidecar->waitWhileBusy($run['id']);
    expect($run['status'] === 'completed', 'the run did not complete', $run);
    echo "output: {$run['output']}\n";
    exit(0);
} catch (NrllmError $error) {
    fail($error->getMessage() . "\n" . $error->raw);
}
