// Cards as the contracts write them: rank then suit ("4H", "10S", "AC"), the joker "JK".
//
// The order is the engine's (engine/cards.py): suit by suit (S H D C), ace low, jokers last, so a
// hand sorted here is sorted as the server sorts it.

export const SUITS = ["S", "H", "D", "C"];
export const RANKS = ["A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K"];
export const JOKER = "JK";
const SUIT_SYMBOLS = { S: "♠", H: "♥", D: "♦", C: "♣" };
const SUIT_NAMES = { S: "spades", H: "hearts", D: "diamonds", C: "clubs" };

/** The card's code (0..51 suited, 52 the joker), or -1 for a string that is not a card. */
export function cardCode(card) {
  if (typeof card !== "string") return -1;
  const text = card.toUpperCase();
  if (text === JOKER) return 52;
  const suit = SUITS.indexOf(text.slice(-1));
  const rank = RANKS.indexOf(text.slice(0, -1));
  if (suit < 0 || rank < 0) return -1;
  return suit * 13 + rank;
}

/** A sorted copy of `cards` (the engine's order). */
export function sortCards(cards) {
  return [...cards].sort((a, b) => cardCode(a) - cardCode(b));
}

export function isSorted(cards) {
  for (let i = 1; i < cards.length; i += 1) {
    if (cardCode(cards[i - 1]) > cardCode(cards[i])) return false;
  }
  return true;
}

export function rankOf(card) {
  return card === JOKER ? "JK" : card.slice(0, -1);
}

export function suitOf(card) {
  return card === JOKER ? "" : card.slice(-1);
}

export function isRed(card) {
  const suit = suitOf(card);
  return suit === "H" || suit === "D";
}

export function isWild(card) {
  return card === JOKER || rankOf(card) === "2";
}

/** "10♥", "JK★": for people. */
export function prettyCard(card) {
  if (card === JOKER) return "JK★";
  return rankOf(card) + (SUIT_SYMBOLS[suitOf(card)] || suitOf(card));
}

/** "ten of hearts", for screen readers. */
export function spokenCard(card) {
  if (card === JOKER) return "joker";
  return `${rankOf(card)} of ${SUIT_NAMES[suitOf(card)] || suitOf(card)}`;
}

export function suitSymbol(card) {
  return card === JOKER ? "★" : SUIT_SYMBOLS[suitOf(card)] || "";
}

/** Whether the multiset `part` is contained in the multiset `whole` (arrays of card strings). */
export function containsAll(whole, part) {
  const counts = new Map();
  for (const card of whole) counts.set(card, (counts.get(card) || 0) + 1);
  for (const card of part) {
    const left = counts.get(card) || 0;
    if (left === 0) return false;
    counts.set(card, left - 1);
  }
  return true;
}

/** Whether two arrays of cards hold the same cards, whatever their order. */
export function sameCards(a, b) {
  return a.length === b.length && containsAll(a, b);
}

/** Remove one copy of each of `cards` from `hand` (in place); the cards not found. */
export function removeCards(hand, cards) {
  const missing = [];
  for (const card of cards) {
    const index = hand.indexOf(card);
    if (index >= 0) hand.splice(index, 1);
    else missing.push(card);
  }
  return missing;
}
