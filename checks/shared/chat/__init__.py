"""What the chat-template checks of several families share: the conversations that exercise a template's
branches (conversations.py), the one-tool conversation rendered leniently (tool_conversations.py) and the one
end-of-turn detector (end_of_turn.py)."""
