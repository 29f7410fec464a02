#!/usr/bin/env node
// A small OpenID Connect provider for the compatibility tests: discovery, a
// JWK set (an RSA key made at start), a sign-in page (the authorization
// endpoint: a form naming the user, nothing checked) and a token endpoint.
// The token endpoint exchanges a code once, for the PKCE verifier of its
// challenge, for an RS256 access token whose scopes make the user an
// administrator of the broker (the UI's single sign-on test); and gives a
// client (grant_type=client_credentials) a token for the client id with the
// scopes it asks for (clients logging in with tokens: test_oauth.py).
//
//   node oidc_provider.js <port>
//
// Prints "oidc provider ready <issuer>" once it listens on 127.0.0.1:<port>.
'use strict';

const crypto = require('node:crypto');
const http = require('node:http');

const PORT = Number(process.argv[2] || 0);
const RSID = process.env.OIDC_RESOURCE_SERVER_ID || 'lavinmq';
const SCOPES = ['tag:administrator', 'configure:*/*', 'write:*/*', 'read:*/*'].map((s) => `${RSID}.${s}`).join(' ');

const { privateKey, publicKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const KID = crypto.randomBytes(6).toString('hex');
const jwk = { ...publicKey.export({ format: 'jwk' }), kid: KID, alg: 'RS256', use: 'sig' };

/** Sign-ins under way, by code. */
const codes = new Map();

const b64url = (buf) => Buffer.from(buf).toString('base64url');

/** An RS256 JWT of `claims`. */
function sign(claims) {
  const head = b64url(JSON.stringify({ alg: 'RS256', typ: 'JWT', kid: KID }));
  const body = b64url(JSON.stringify(claims));
  const signature = crypto.sign('sha256', Buffer.from(`${head}.${body}`), privateKey);
  return `${head}.${body}.${b64url(signature)}`;
}

const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

function send(res, status, type, body, headers = {}) {
  res.writeHead(status, { 'Content-Type': type, 'Cache-Control': 'no-store', ...headers });
  res.end(body);
}
const json = (res, status, value) => send(res, status, 'application/json', JSON.stringify(value));

/** The request body as form fields. */
function form(req) {
  return new Promise((resolve, reject) => {
    let data = '';
    req.on('data', (c) => {
      data += c;
      if (data.length > 65536) reject(new Error('body too large'));
    });
    req.on('end', () => resolve(new URLSearchParams(data)));
    req.on('error', reject);
  });
}

let issuer = '';

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, issuer);
  try {
    if (req.method === 'GET' && url.pathname === '/.well-known/openid-configuration') {
      return json(res, 200, {
        issuer,
        jwks_uri: `${issuer}/keys`,
        authorization_endpoint: `${issuer}/authorize`,
        token_endpoint: `${issuer}/token`,
        response_types_supported: ['code'],
        code_challenge_methods_supported: ['S256'],
      });
    }
    if (req.method === 'GET' && url.pathname === '/keys') return json(res, 200, { keys: [jwk] });
    if (req.method === 'GET' && url.pathname === '/authorize') {
      const q = url.searchParams;
      if (q.get('response_type') !== 'code' || q.get('code_challenge_method') !== 'S256' || !q.get('code_challenge')) {
        return send(res, 400, 'text/plain', 'authorization code flow with PKCE S256 only');
      }
      const hidden = ['client_id', 'redirect_uri', 'state', 'code_challenge']
        .map((k) => `<input type="hidden" name="${k}" value="${escapeHtml(q.get(k) || '')}">`)
        .join('');
      return send(res, 200, 'text/html; charset=utf-8', `<!doctype html><title>Test identity provider</title>
<h1>Test identity provider</h1>
<form method="post" action="/authorize">${hidden}
<label>User <input name="username" data-testid="idp-username" value="sso-admin"></label>
<button type="submit" data-testid="idp-sign-in">Sign in</button></form>`);
    }
    if (req.method === 'POST' && url.pathname === '/authorize') {
      const f = await form(req);
      const code = crypto.randomBytes(16).toString('hex');
      codes.set(code, {
        challenge: f.get('code_challenge'),
        client: f.get('client_id'),
        redirect: f.get('redirect_uri'),
        user: f.get('username'),
      });
      const back = new URL(f.get('redirect_uri'));
      back.searchParams.set('code', code);
      back.searchParams.set('state', f.get('state') || '');
      return send(res, 302, 'text/plain', '', { Location: back.toString() });
    }
    if (req.method === 'POST' && url.pathname === '/token') {
      const f = await form(req);
      const now = Math.floor(Date.now() / 1000);
      if (f.get('grant_type') === 'client_credentials') {
        const client = f.get('client_id');
        if (!client) return json(res, 400, { error: 'invalid_client' });
        const ttl = Number(f.get('ttl') || 3600);
        const token = sign({ iss: issuer, aud: RSID, sub: client, scope: f.get('scope') || SCOPES, iat: now, exp: now + ttl });
        return json(res, 200, { access_token: token, token_type: 'Bearer', expires_in: ttl });
      }
      const pending = codes.get(f.get('code'));
      codes.delete(f.get('code'));
      const verifier = f.get('code_verifier') || '';
      const challenge = b64url(crypto.createHash('sha256').update(verifier).digest());
      if (f.get('grant_type') !== 'authorization_code' || !pending || pending.challenge !== challenge
          || pending.client !== f.get('client_id') || pending.redirect !== f.get('redirect_uri')) {
        return json(res, 400, { error: 'invalid_grant' });
      }
      const token = sign({ iss: issuer, aud: RSID, sub: pending.user, scope: SCOPES, iat: now, exp: now + 3600 });
      return json(res, 200, { access_token: token, token_type: 'Bearer', expires_in: 3600 });
    }
    send(res, 404, 'text/plain', 'not found');
  } catch (e) {
    send(res, 500, 'text/plain', e.message);
  }
});

server.listen(PORT, '127.0.0.1', () => {
  issuer = `http://127.0.0.1:${server.address().port}`;
  console.log(`oidc provider ready ${issuer}`);
});
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => server.close(() => process.exit(0)));
