<?php
/*
 * The rest of the host guide (docs/host-guide.md) against a running sidecar: an input pause answered with
 * a stored decision, a reviewer who decides another actor's run through a grant, a cancel, and an error.
 *
 *   NRLLM_URL=http://127.0.0.1:8780 NRLLM_TOKEN=<a host token> NRLLM_ACTOR=be_user:7 \
 *       php docs/examples/php/more_steps.php
 *
 * NRLLM_REVIEWER (default be_user:9) is given agent:approve in workspace 0 for the time of the script and
 * has it taken away at the end: run it against a sidecar for development, not against production.
 * Exit status 0 on success; anything unexpected prints the answer on standard error and exits 1.
 */

declare(strict_types=1);

require __DIR__ . '/NrllmClient.php';

function fail(string $why): never
{
    fwrite(STDERR, "more_steps failed: $why\n");
    exit(1);
}

function expect(bool $condition, string $why, mixed $answer): void
{
    if (!$condition) {
        fail($why . "\n" . json_encode($answer, JSON_PRETTY_PRINT | JSON_UNESCAPED_SLASHES));
    }
}

/** What a host shows for a run that waits for a remote agent: not a question, "working elsewhere". */
function describeDependencyWait(NrllmClient $sidecar, string $runId): void
{
    $wait = $sidecar->run($runId)['waiting'];
    echo "waiting for {$wait['remote_agent']} since {$wait['since']}, until {$wait['deadline_at']}\n";
}

$url = getenv('NRLLM_URL') ?: 'http://127.0.0.1:8780';
$token = getenv('NRLLM_TOKEN') ?: fail('set NRLLM_TOKEN to a host token (nrllm-sidecar token create --role host)');
$actor = getenv('NRLLM_ACTOR') ?: fail('set NRLLM_ACTOR to the actor the runs belong to, e.g. be_user:7');
$reviewer = getenv('NRLLM_REVIEWER') ?: 'be_user:9';

$sidecar = new NrllmClient($url, $token, $actor);
$approvalRun = [
    'input' => 'Leave a note for the reviewers',
    'script' => [
        ['tool_calls' => [['id' => 'call_1', 'name' => 'write_note', 'arguments' => ['text' => 'Please review']]]],
        ['content' => 'Done: {last_tool_result}'],
    ],
];

try {
    // An input pause (ask_user), answered with a stored decision that a worker continues.
    $run = $sidecar->createRun([
        'input' => 'Ask for the page title',
        'script' => [
            ['tool_calls' => [['id' => 'ask', 'name' => 'ask_user', 'arguments' => [
                'question' => 'Which title?',
                'schema' => ['type' => 'object', 'properties' => ['title' => ['type' => 'string']],
                             'required' => ['title']],
            ]]]],
            ['content' => 'Title: {last_tool_result}'],
        ],
    ], NrllmClient::newKey());
    $run = $sidecar->waitWhileBusy($run['id']);
    expect($run['status'] === 'waiting_for_input', 'the run does not wait for input', $run);
    $waiting = $run['waiting'];
    echo "asks: {$waiting['question']}\n";
    $receipt = $sidecar->decide($run['id'], [
        'pause_id' => $waiting['pause_id'],
        'generation' => $waiting['generation'],
        'decision' => 'input',
        'input' => ['title' => 'Our services'],
        'mode' => 'store',
    ], NrllmClient::newKey());
    echo "stored as {$receipt['receipt_id']} at {$receipt['stored_at']}\n";
    $run = $sidecar->waitWhileBusy($run['id']);
    expect($run['status'] === 'completed', 'the stored input did not complete the run', $run);
    echo "output: {$run['output']}\n";

    // A reviewer decides another actor's run: a grant, then the reviewer's inbox.
    $run = $sidecar->waitWhileBusy($sidecar->createRun($approvalRun, NrllmClient::newKey())['id']);
    expect($run['status'] === 'waiting_for_approval', 'the run does not wait for approval', $run);
    $sidecar->setGrants($reviewer, ['agent:approve']);
    $inbox = $sidecar->asActor($reviewer)->inbox();
    $items = array_filter($inbox, fn ($item) => $item['run_id'] === $run['id']);
    expect(count($items) === 1, "the run is not in $reviewer's inbox", $items);
    $item = array_values($items)[0];
    $decided = $sidecar->asActor($reviewer)->decide($run['id'], [
        'pause_id' => $item['pause_id'], 'generation' => $item['generation'], 'decision' => 'approve',
        'turn_digest' => $item['turn_digest'], 'mode' => 'now',
    ], NrllmClient::newKey());
    expect($decided['status'] === 'completed', "$reviewer's approval did not complete the run", $decided);
    echo "approved by $reviewer: {$decided['output']}\n";
    $sidecar->setGrants($reviewer, []);

    // Cancel: a waiting or queued run is cancelled at once, a running one at its next step.
    $other = $sidecar->createRun($approvalRun, NrllmClient::newKey());
    $cancelled = $sidecar->cancel($other['id']);
    $run = $sidecar->waitWhileBusy($other['id']);
    expect($run['status'] === 'cancelled', 'the run was not cancelled', [$cancelled, $run]);
    echo "cancelled {$run['id']}\n";
    if ($run['status'] === 'waiting_for_dependency') {
        describeDependencyWait($sidecar, $run['id']);
    }

    // An error: a run without input is 422 validation_failed, with the field in `errors`.
    try {
        $sidecar->createRun(['provider' => 'scripted'], NrllmClient::newKey());
        fail('a run without input was accepted');
    } catch (NrllmError $error) {
        expect($error->status === 422 && $error->errorCode() === 'validation_failed'
            && isset($error->body['errors']['input']), 'not the expected refusal', $error->body);
        echo "refused: {$error->errorCode()} ({$error->body['errors']['input'][0]})\n";
    }
    exit(0);
} catch (NrllmError $error) {
    fail($error->getMessage() . "\n" . $error->raw);
}
