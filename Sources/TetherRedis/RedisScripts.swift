// The Lua scripts of the Redis store. Each runs atomically on the server (Redis runs one
// script at a time), so every step of the store contract is one script: an append's bounds,
// its writes and its trimming happen together or not at all.
//
// Keys, after the configured prefix P:
//   P clients        a set of the client ids that have a mailbox
//   P bytes          what every held message counts for MailboxLimits.maximumStoredBytes
//   P m:<id>         a hash: last, ack, lost, reason, epoch, active, bytes
//   P q:<id>         a list of the held messages, oldest first: their sequences run
//                    consecutively to `last` (only the front is ever removed); each is
//                    "<storedAt>,<expiresAt or empty>,<type>|<payload>"
//   P r:<id>         a hash of keyed requests: "0" running, "1<answer>" answered, "2"
//                    answered, answer not kept
//   P rt:<id>        a sorted set of the same keys by the time each began
//   P rb:<id>        the bytes of answers kept for the client
//   P rcount         request records across all clients
// and, for a cluster:
//   P node:<name>    a node's heartbeat, expiring after the node timeout
//   P held:<name>    a set of the clients a node has claimed
//   P n:<name>       the pub/sub channel of a node's notices: "p<seq>:<id length>:<id><item>"
//                    (a push with its content), "w<seq>:<id length>:<id>" (wake up: read
//                    the mailbox through seq), "t<generation>:<id length>:<id><node>" (taken
//                    over by node)
//   P b              the pub/sub channel of broadcasts: "<origin length>:<origin><type>|<payload>"
//   and the mailbox hash gains holder (a node's name, or empty) and gen (the claims so far)

enum RedisScripts {
    /// Helpers every script shares.
    static let prelude = #"""
    local P = ARGV[1]
    local function payloadSize(item)
      return #item - string.find(item, '|', 1, true)
    end
    local function storedAt(item)
      return tonumber(string.match(item, '^(%d+)'))
    end
    -- How many messages from the front of a list of `count` are older than `oldest`.
    local function expiredCount(qk, count, oldest)
      local n = 0
      if oldest < 0 then return 0 end
      while n < count do
        local item = redis.call('LINDEX', qk, n)
        if storedAt(item) >= oldest then break end
        n = n + 1
      end
      return n
    end
    -- The bytes the first `n` items of a list count for.
    local function frontBytes(qk, n, overhead)
      if n <= 0 then return 0 end
      local total = 0
      local items = redis.call('LRANGE', qk, 0, n - 1)
      for _, item in ipairs(items) do total = total + payloadSize(item) + overhead end
      return total
    end
    -- A command over many arguments, in steps small enough for Lua's stack.
    local function callInSteps(command, key, values)
      for start = 1, #values, 1000 do
        redis.call(command, key, unpack(values, start, math.min(start + 999, #values)))
      end
    end
    local function newMailbox(id, now, base)
      redis.call('HSET', P .. 'm:' .. id, 'last', 0, 'ack', 0, 'lost', 0, 'reason', '', 'epoch', string.sub(redis.sha1hex(base .. id), 1, 32), 'active', now, 'bytes', 0)
      redis.call('SADD', P .. 'clients', id)
    end
    -- Drops what the age and count bounds no longer allow from a mailbox's front, as lost.
    -- Returns the bytes freed.
    local function enforce(id, oldest, maxMessages, overhead)
      local mk = P .. 'm:' .. id
      local qk = P .. 'q:' .. id
      local count = redis.call('LLEN', qk)
      if count == 0 then return 0 end
      local last = tonumber(redis.call('HGET', mk, 'last'))
      local expired = expiredCount(qk, count, oldest)
      local excess = count - expired - math.max(0, maxMessages)
      if excess < 0 then excess = 0 end
      local dropped = expired + excess
      if dropped == 0 then return 0 end
      local freed = frontBytes(qk, dropped, overhead)
      redis.call('LTRIM', qk, dropped, -1)
      local first = last - count + 1
      local lost = math.max(tonumber(redis.call('HGET', mk, 'lost')), first + dropped - 1)
      local reason = 'expired'
      if excess > 0 then reason = 'overflow' end
      redis.call('HSET', mk, 'lost', lost, 'reason', reason, 'bytes', tonumber(redis.call('HGET', mk, 'bytes')) - freed)
      redis.call('DECRBY', P .. 'bytes', freed)
      return freed
    end
    -- Tells the node that holds a client of pushes stored through `last`: each small one
    -- with its content, or one wake-up.
    local function notify(id, items, firstNew, last, inline)
      local holder = redis.call('HGET', P .. 'm:' .. id, 'holder')
      if not holder or holder == '' then return end
      local channel = P .. 'n:' .. holder
      local size = 0
      for _, item in ipairs(items) do size = size + #item end
      if items[1] == nil or size > inline then
        redis.call('PUBLISH', channel, 'w' .. last .. ':' .. #id .. ':' .. id)
        return
      end
      for k, item in ipairs(items) do
        redis.call('PUBLISH', channel, 'p' .. (firstNew + k - 1) .. ':' .. #id .. ':' .. id .. item)
      end
    end
    local function summary(id)
      local f = redis.call('HMGET', P .. 'm:' .. id, 'last', 'ack', 'lost', 'reason', 'epoch')
      return {'ok', tonumber(f[1]), tonumber(f[2]), tonumber(f[3]), f[4], redis.call('LLEN', P .. 'q:' .. id), f[5]}
    end
    """#

    /// ARGV: P, now, oldest (-1 for none), maxMessages, maxMailboxes, maxBytes, overhead,
    /// epoch base, inline bytes, n, then n × (client id, item, payload size).
    /// Returns {'ok', sequences…}, {'mailboxes', id} or {'bytes', total}.
    static let append = prelude + "\n" + #"""
    local now = tonumber(ARGV[2])
    local oldest = tonumber(ARGV[3])
    local maxMessages = tonumber(ARGV[4])
    local maxMailboxes = tonumber(ARGV[5])
    local maxBytes = tonumber(ARGV[6])
    local overhead = tonumber(ARGV[7])
    local base = ARGV[8]
    local inline = tonumber(ARGV[9])
    local n = tonumber(ARGV[10])
    local order = {}
    local drafts = {}
    for i = 0, n - 1 do
      local id = ARGV[11 + i * 3]
      if drafts[id] == nil then
        drafts[id] = {}
        order[#order + 1] = id
      end
      local list = drafts[id]
      list[#list + 1] = i
    end
    -- First the plan: nothing is written until every bound is known to hold.
    local mailboxes = redis.call('SCARD', P .. 'clients')
    local fresh = 0
    local change = 0
    local plans = {}
    for _, id in ipairs(order) do
      local mk = P .. 'm:' .. id
      local qk = P .. 'q:' .. id
      local f = redis.call('HMGET', mk, 'last', 'bytes')
      local exists = f[1] ~= false
      if not exists then
        fresh = fresh + 1
        if mailboxes + fresh > maxMailboxes then return {'mailboxes', id} end
      end
      local last = tonumber(f[1] or '0')
      local count = 0
      if exists then count = redis.call('LLEN', qk) end
      local added = #drafts[id]
      local expired = expiredCount(qk, count, oldest)
      local excess = count + added - expired - math.max(0, maxMessages)
      if excess < 0 then excess = 0 end
      local dropped = expired + excess
      -- What the dropped messages counted for: held ones, then new ones.
      local fromHeld = math.min(dropped, count)
      local freed = frontBytes(qk, fromHeld, overhead)
      local addedBytes = 0
      for k, index in ipairs(drafts[id]) do
        local size = tonumber(ARGV[13 + index * 3]) + overhead
        addedBytes = addedBytes + size
        if k <= dropped - fromHeld then freed = freed + size end
      end
      change = change + addedBytes - freed
      plans[id] = {exists = exists, last = last, count = count, dropped = dropped, expired = expired, excess = excess, delta = addedBytes - freed}
    end
    local total = tonumber(redis.call('GET', P .. 'bytes') or '0')
    if change > 0 and total + change > maxBytes then return {'bytes', total + change} end
    -- Then the writes.
    local sequences = {}
    for _, id in ipairs(order) do
      local plan = plans[id]
      local mk = P .. 'm:' .. id
      local qk = P .. 'q:' .. id
      if not plan.exists then newMailbox(id, now, base) end
      local items = {}
      for k, index in ipairs(drafts[id]) do
        items[k] = ARGV[12 + index * 3]
        sequences[index + 1] = plan.last + k
      end
      callInSteps('RPUSH', qk, items)
      local last = plan.last + #items
      local fields = {'last', last, 'bytes', tonumber(redis.call('HGET', mk, 'bytes')) + plan.delta}
      if plan.dropped > 0 then
        redis.call('LTRIM', qk, plan.dropped, -1)
        local first = plan.last - plan.count + 1
        local lost = math.max(tonumber(redis.call('HGET', mk, 'lost')), first + plan.dropped - 1)
        local reason = 'expired'
        if plan.excess > 0 then reason = 'overflow' end
        fields[#fields + 1] = 'lost'
        fields[#fields + 1] = lost
        fields[#fields + 1] = 'reason'
        fields[#fields + 1] = reason
      end
      if tonumber(redis.call('HGET', mk, 'active')) < now then
        fields[#fields + 1] = 'active'
        fields[#fields + 1] = now
      end
      redis.call('HSET', mk, unpack(fields))
      -- New messages the count bound dropped at once are not sent: the holder reads the loss.
      if plan.dropped > plan.count then items = {} end
      notify(id, items, plan.last + 1, last, inline)
    end
    if change ~= 0 then redis.call('INCRBY', P .. 'bytes', change) end
    local reply = {'ok'}
    for i = 1, n do reply[i + 1] = sequences[i] end
    return reply
    """#

    /// ARGV: P, id, now, oldest, maxMessages, maxMailboxes, overhead, epoch base.
    /// Returns the summary {'ok', last, ack, lost, reason, count, epoch} or {'mailboxes', id}.
    static let open = prelude + "\n" + #"""
    local id = ARGV[2]
    local now = tonumber(ARGV[3])
    local mk = P .. 'm:' .. id
    if redis.call('EXISTS', mk) == 0 then
      if redis.call('SCARD', P .. 'clients') >= tonumber(ARGV[6]) then return {'mailboxes', id} end
      newMailbox(id, now, ARGV[8])
    end
    enforce(id, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[7]))
    if tonumber(redis.call('HGET', mk, 'active')) < now then redis.call('HSET', mk, 'active', now) end
    return summary(id)
    """#

    /// ARGV: P, id, after, limit. Returns {first sequence, items…} or {}.
    static let messages = prelude + "\n" + #"""
    local id = ARGV[2]
    local after = tonumber(ARGV[3])
    local limit = tonumber(ARGV[4])
    local last = redis.call('HGET', P .. 'm:' .. id, 'last')
    if not last or limit <= 0 then return {} end
    last = tonumber(last)
    local qk = P .. 'q:' .. id
    local count = redis.call('LLEN', qk)
    local first = last - count + 1
    local start = math.max(after + 1, first)
    if start > last then return {} end
    local reply = {start}
    local stop = start - first + math.min(limit, count) - 1
    local items = redis.call('LRANGE', qk, start - first, stop)
    for i, item in ipairs(items) do reply[i + 1] = item end
    return reply
    """#

    /// ARGV: P, overhead, then pairs (id, through).
    static let acknowledge = prelude + "\n" + #"""
    local overhead = tonumber(ARGV[2])
    local i = 3
    while i < #ARGV do
      local id = ARGV[i]
      local sequence = tonumber(ARGV[i + 1])
      i = i + 2
      local mk = P .. 'm:' .. id
      local f = redis.call('HMGET', mk, 'last', 'ack', 'bytes')
      if f[1] then
        local last = tonumber(f[1])
        local through = math.min(sequence, last)
        if through > tonumber(f[2]) then
          local qk = P .. 'q:' .. id
          local count = redis.call('LLEN', qk)
          local first = last - count + 1
          local dropped = math.max(0, math.min(count, through - first + 1))
          local freed = frontBytes(qk, dropped, overhead)
          if dropped > 0 then redis.call('LTRIM', qk, dropped, -1) end
          redis.call('HSET', mk, 'ack', through, 'bytes', tonumber(f[3]) - freed)
          if freed > 0 then redis.call('DECRBY', P .. 'bytes', freed) end
        end
      end
    end
    return 'ok'
    """#

    /// ARGV: P, now, oldest (-1 for none), maxMessages, overhead, then pairs (id,
    /// connected 0 or 1). Returns the ids removed.
    static let expire = prelude + "\n" + #"""
    local now = tonumber(ARGV[2])
    local oldest = tonumber(ARGV[3])
    local maxMessages = tonumber(ARGV[4])
    local overhead = tonumber(ARGV[5])
    local removed = {}
    local function heldByLiveNode(id)
      local holder = redis.call('HGET', P .. 'm:' .. id, 'holder')
      return holder and holder ~= '' and redis.call('EXISTS', P .. 'node:' .. holder) == 1
    end
    local i = 6
    while i < #ARGV do
      local id = ARGV[i]
      local connected = ARGV[i + 1] == '1'
      i = i + 2
      local mk = P .. 'm:' .. id
      local f = redis.call('HMGET', mk, 'active', 'bytes')
      if f[1] then
        if connected then
          if tonumber(f[1]) < now then redis.call('HSET', mk, 'active', now) end
          enforce(id, oldest, maxMessages, overhead)
        elseif oldest >= 0 and tonumber(f[1]) < oldest and not heldByLiveNode(id) then
          redis.call('DEL', mk, P .. 'q:' .. id)
          redis.call('SREM', P .. 'clients', id)
          redis.call('DECRBY', P .. 'bytes', tonumber(f[2]))
          removed[#removed + 1] = id
        else
          enforce(id, oldest, maxMessages, overhead)
        end
      else
        redis.call('SREM', P .. 'clients', id)
      end
    end
    return removed
    """#

    /// ARGV: P, id, now, oldest, maxMessages, maxMailboxes, overhead, epoch base, node.
    /// Opens the mailbox as ``open`` does, records the node as its holder with the next
    /// generation, and tells the node that held it before. Returns the summary and the
    /// generation, or {'mailboxes', id}.
    static let claim = prelude + "\n" + #"""
    local id = ARGV[2]
    local now = tonumber(ARGV[3])
    local node = ARGV[9]
    local mk = P .. 'm:' .. id
    if redis.call('EXISTS', mk) == 0 then
      if redis.call('SCARD', P .. 'clients') >= tonumber(ARGV[6]) then return {'mailboxes', id} end
      newMailbox(id, now, ARGV[8])
    end
    enforce(id, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[7]))
    if tonumber(redis.call('HGET', mk, 'active')) < now then redis.call('HSET', mk, 'active', now) end
    local before = redis.call('HGET', mk, 'holder')
    local generation = redis.call('HINCRBY', mk, 'gen', 1)
    redis.call('HSET', mk, 'holder', node)
    redis.call('SADD', P .. 'held:' .. node, id)
    if before and before ~= '' and before ~= node then
      redis.call('SREM', P .. 'held:' .. before, id)
      redis.call('PUBLISH', P .. 'n:' .. before, 't' .. generation .. ':' .. #id .. ':' .. id .. node)
    end
    local reply = summary(id)
    reply[#reply + 1] = generation
    return reply
    """#

    /// ARGV: P, node, then pairs (id, generation): each claim of the node that no later
    /// claim replaced is released.
    static let release = prelude + "\n" + #"""
    local node = ARGV[2]
    local i = 3
    while i < #ARGV do
      local id = ARGV[i]
      local generation = ARGV[i + 1]
      i = i + 2
      local f = redis.call('HMGET', P .. 'm:' .. id, 'holder', 'gen')
      if f[1] == node and f[2] == generation then
        redis.call('HSET', P .. 'm:' .. id, 'holder', '')
        redis.call('SREM', P .. 'held:' .. node, id)
      end
    end
    return 'ok'
    """#

    /// ARGV: P, node: releases every client the node holds (it starts again, or leaves).
    static let releaseNode = prelude + "\n" + #"""
    local node = ARGV[2]
    local held = P .. 'held:' .. node
    for _, id in ipairs(redis.call('SMEMBERS', held)) do
      if redis.call('HGET', P .. 'm:' .. id, 'holder') == node then
        redis.call('HSET', P .. 'm:' .. id, 'holder', '')
      end
    end
    redis.call('DEL', held)
    return 'ok'
    """#

    /// Drops a client's request records older than the window; shared by the two below.
    static let requestPrelude = prelude + "\n" + #"""
    local function dropOldRequests(id, before)
      local rk = P .. 'r:' .. id
      local tk = P .. 'rt:' .. id
      local old = redis.call('ZRANGEBYSCORE', tk, '-inf', '(' .. before)
      if #old == 0 then return end
      local freed = 0
      for _, key in ipairs(old) do
        local value = redis.call('HGET', rk, key)
        if value and string.sub(value, 1, 1) == '1' then freed = freed + #value - 1 end
      end
      callInSteps('HDEL', rk, old)
      callInSteps('ZREM', tk, old)
      redis.call('DECRBY', P .. 'rcount', #old)
      if freed > 0 then redis.call('DECRBY', P .. 'rb:' .. id, freed) end
    end
    """#

    /// ARGV: P, id, key, now, window start (records before it are forgotten), max per
    /// client, max in all. Returns {'started'}, {'running'}, {'answered', answer},
    /// {'notKept'}, {'client', count} or {'total', count}.
    static let beginRequest = requestPrelude + "\n" + #"""
    local id = ARGV[2]
    local key = ARGV[3]
    local rk = P .. 'r:' .. id
    dropOldRequests(id, tonumber(ARGV[5]))
    local value = redis.call('HGET', rk, key)
    if value then
      local kind = string.sub(value, 1, 1)
      if kind == '0' then return {'running'} end
      if kind == '1' then return {'answered', string.sub(value, 2)} end
      return {'notKept'}
    end
    local clientCount = redis.call('HLEN', rk)
    if clientCount >= tonumber(ARGV[6]) then return {'client', clientCount} end
    local total = tonumber(redis.call('GET', P .. 'rcount') or '0')
    if total >= tonumber(ARGV[7]) then return {'total', total} end
    redis.call('HSET', rk, key, '0')
    redis.call('ZADD', P .. 'rt:' .. id, tonumber(ARGV[4]), key)
    redis.call('INCR', P .. 'rcount')
    return {'started'}
    """#

    /// ARGV: P, id, key, answer, max bytes per client.
    static let finishRequest = requestPrelude + "\n" + #"""
    local id = ARGV[2]
    local key = ARGV[3]
    local rk = P .. 'r:' .. id
    if redis.call('HGET', rk, key) ~= '0' then return 'ok' end
    local bytes = tonumber(redis.call('GET', P .. 'rb:' .. id) or '0')
    if bytes + #ARGV[4] <= tonumber(ARGV[5]) then
      redis.call('HSET', rk, key, '1' .. ARGV[4])
      redis.call('INCRBY', P .. 'rb:' .. id, #ARGV[4])
    else
      redis.call('HSET', rk, key, '2')
    end
    return 'ok'
    """#
}
